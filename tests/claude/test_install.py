"""``meshctl claude install|uninstall|status``: what goes into Claude Code's settings and
how exactly it comes out again (byte for byte, a user's edits kept)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import MeshEnv

from meshctl.cli.admin import json_splice as js

EVENTS = ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"]
#: A settings file as a person keeps it: four spaces, a one-line hook group, their order.
KEPT = """{
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo bash"}]}
        ],
        "Notification": []
    },

    "env": {"FOO": "1"}
}
"""


def meshctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "meshctl", *args], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.fixture
def home(mesh_env: MeshEnv, tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """(environment, home, project) with a home of the test's own."""
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "proj"
    project.mkdir()
    return {**mesh_env.env, "HOME": str(home)}, home, project


def ours(doc: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [g for g in doc["hooks"].get(event, []) if "meshctl/claude/hook.py" in json.dumps(g)]


class TestInstall:
    def test_install_adds_one_group_per_event_and_the_server(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, home_dir, project = home
        settings_file = project / ".claude" / "settings.local.json"
        settings_file.parent.mkdir()
        settings_file.write_text(KEPT)
        r = meshctl(env, "claude", "install", "--project", str(project))
        doc = json.loads(settings_file.read_text())
        state = json.loads((home_dir / ".claude.json").read_text())

        assert r.returncode == 0, r.stderr
        assert all(len(ours(doc, e)) == 1 for e in EVENTS)
        assert ours(doc, "PreToolUse")[0]["matcher"] == "Write|Edit|MultiEdit|NotebookEdit"
        assert doc["hooks"]["PreToolUse"][0]["matcher"] == "Bash"  # theirs first, untouched
        assert list(doc) == ["model", "permissions", "hooks", "env"]
        server = state["projects"][str(project)]["mcpServers"]["session-mesh"]
        assert server["args"][-3:] == ["mcp", "--source", "claude-code"]

    def test_install_twice_keeps_one_of_each(self, home: tuple[dict[str, str], Path, Path]) -> None:
        env, _, project = home
        meshctl(env, "claude", "install", "--project", str(project))
        meshctl(env, "claude", "install", "--project", str(project))
        doc = json.loads((project / ".claude" / "settings.local.json").read_text())

        assert all(len(ours(doc, e)) == 1 for e in EVENTS)

    def test_a_file_that_is_not_json_is_refused_and_left_alone(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, _, project = home
        settings_file = project / ".claude" / "settings.local.json"
        settings_file.parent.mkdir()
        settings_file.write_text('{"model": "opus",}\n')
        r = meshctl(env, "claude", "install", "--project", str(project))

        assert r.returncode == 1
        assert "not valid JSON" in r.stderr
        assert settings_file.read_text() == '{"model": "opus",}\n'

    def test_status_says_what_is_installed(self, home: tuple[dict[str, str], Path, Path]) -> None:
        env, _, project = home
        before = json.loads(meshctl(env, "claude", "status", "--project", str(project),
                                    "--json").stdout)  # fmt: skip
        meshctl(env, "claude", "install", "--project", str(project))
        after = json.loads(meshctl(env, "claude", "status", "--project", str(project),
                                   "--json").stdout)  # fmt: skip

        assert (before["hooks"], before["mcp_server"]) == ([], None)
        assert after["hooks"] == EVENTS
        assert after["mcp_server"]["args"][-3:] == ["mcp", "--source", "claude-code"]

    def test_user_scope_uses_the_user_settings_and_top_level_servers(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, home_dir, _ = home
        r = meshctl(env, "claude", "install", "--user")
        doc = json.loads((home_dir / ".claude" / "settings.json").read_text())
        state = json.loads((home_dir / ".claude.json").read_text())
        meshctl(env, "claude", "uninstall", "--user")

        assert r.returncode == 0, r.stderr
        assert all(len(ours(doc, e)) == 1 for e in EVENTS)
        assert "session-mesh" in state["mcpServers"]
        assert not (home_dir / ".claude" / "settings.json").exists()
        assert (
            "session-mesh" not in json.loads((home_dir / ".claude.json").read_text())["mcpServers"]
        )

    def test_project_and_user_together_is_a_usage_error(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, _, project = home
        r = meshctl(env, "claude", "install", "--project", str(project), "--user")

        assert r.returncode == 2


class TestUninstall:
    def test_gives_the_file_back_byte_for_byte(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, _, project = home
        settings_file = project / ".claude" / "settings.local.json"
        settings_file.parent.mkdir()
        settings_file.write_text(KEPT)
        meshctl(env, "claude", "install", "--project", str(project))
        r = meshctl(env, "claude", "uninstall", "--project", str(project))

        assert r.returncode == 0, r.stderr
        assert settings_file.read_text() == KEPT

    def test_keeps_the_users_edits_made_in_between(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        """Edits anywhere (a key, a hook of theirs after ours) survive; ours go, and the
        rest of the text is as it was, without the install record's help."""
        env, _, project = home
        settings_file = project / ".claude" / "settings.local.json"
        settings_file.parent.mkdir()
        settings_file.write_text(KEPT)
        meshctl(env, "claude", "install", "--project", str(project))
        edited = settings_file.read_text().replace('"model": "opus"', '"model": "sonnet"')
        doc = js.parse(edited)
        pre = js.find(doc, ["hooks", "PreToolUse"])
        assert pre is not None
        theirs = {"matcher": "Edit", "hooks": [{"type": "command", "command": "lint"}]}
        settings_file.write_text(js.insert(edited, pre, theirs))
        r = meshctl(env, "claude", "uninstall", "--project", str(project))
        after = settings_file.read_text()
        kept = KEPT.replace('"model": "opus"', '"model": "sonnet"')
        kept_pre = js.find(js.parse(kept), ["hooks", "PreToolUse"])
        assert kept_pre is not None

        assert r.returncode == 0, r.stderr
        assert after == js.insert(kept, kept_pre, theirs)  # as if we had never been there

    def test_a_file_install_created_is_removed(
        self, home: tuple[dict[str, str], Path, Path]
    ) -> None:
        env, _, project = home
        meshctl(env, "claude", "install", "--project", str(project))
        created = (project / ".claude" / "settings.local.json").exists()
        meshctl(env, "claude", "uninstall", "--project", str(project))

        assert created
        assert not (project / ".claude").exists()


_KEY = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_JSON = st.recursive(
    _SCALAR,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_KEY, kids, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(doc=st.dictionaries(_KEY, _JSON, max_size=4), indent=st.sampled_from([None, 2, 4, "\t"]),
       value=_JSON)  # fmt: skip
def test_insert_then_remove_gives_the_text_back(doc: Any, indent: Any, value: Any) -> None:
    """Any object, in any layout: adding a member and taking it out is the identity."""
    text = json.dumps(doc, indent=indent) + "\n"
    key = "\x00session-mesh"  # not among the generated keys' own duplicates' concerns
    added = js.insert(text, js.parse(text), value, key)
    root = js.parse(added)
    index = max(i for i, (k, _, _) in enumerate(root.items) if k == key)

    assert json.loads(added) == {**doc, key: value}
    assert js.remove(added, root, index) == text
