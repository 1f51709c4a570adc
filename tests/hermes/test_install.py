"""``meshctl hermes install|uninstall|status`` against the real Hermes 0.19.0."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes


def plugins(h: Hermes) -> dict[str, dict[str, str]]:
    """``hermes plugins list --json``, by name."""
    done = h.run("plugins", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {p["name"]: p for p in json.loads(done.stdout)}


#: A config a person wrote: comments (full-line and inline), blank lines, a CRLF-free
#: file whose last line has no newline.
PERSONAL = (
    "# my Hermes\nmodel:\n  provider: custom  # the fake one\n  base_url: {url}\n"
    "  default: fake-model\n  api_key: dummy\n\n# quiet\nsecurity:\n"
    "  tirith_enabled: false   # off for tests\ndisplay:\n  compact: true"
)


def diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True)))


@pytest.mark.parametrize("on_path", [True, False], ids=["hermes-on-path", "no-hermes"])
def test_install_then_uninstall_leaves_config_byte_identical(hermes: Hermes, on_path: bool) -> None:
    """With `hermes` on PATH and without: Hermes lists the plugin enabled after install,
    and uninstall gives back the very bytes (`hermes plugins enable` used to drop every
    comment and add `_config_version`, `disabled: []`, `entries:` and 40 lines)."""
    config = hermes.home / "config.yaml"
    before = PERSONAL.format(url="http://127.0.0.1:9/v1")
    config.write_bytes(before.encode())

    hermes.install(path=on_path)
    listed = plugins(hermes)["meshd"]["status"]
    installed = config.read_bytes().decode()
    assert hermes.meshctl("hermes", "uninstall", path=on_path).returncode == 0

    assert listed == "enabled"
    assert installed == before + "\nplugins:\n  enabled: [meshd]\n"
    assert diff(before, config.read_bytes().decode()) == ""
    assert config.read_bytes() == before.encode()
    assert "meshd" not in plugins(hermes)


def test_edits_made_between_install_and_uninstall_survive(hermes: Hermes) -> None:
    config = hermes.home / "config.yaml"
    hermes.install()
    edited = config.read_text().replace("tirith_enabled: false", "tirith_enabled: false  # x")
    config.write_text(edited + "# added while the plugin was installed\n")

    assert hermes.meshctl("hermes", "uninstall").returncode == 0

    after = config.read_text()
    assert "tirith_enabled: false  # x" in after
    assert after.endswith("# added while the plugin was installed\n")
    assert "meshd" not in after


class TestInstall:
    def test_install_with_hermes_on_path_shows_enabled(self, hermes: Hermes) -> None:
        """config.yaml is edited in place, and Hermes itself lists the plugin enabled."""
        done = hermes.install()

        listed = plugins(hermes)["meshd"]

        assert done["enabled_by"] == "config.yaml"
        assert done["hermes_sees"] == "enabled"
        assert listed["status"] == "enabled"
        assert listed["source"] == "user"
        assert (hermes.home / "plugins" / "meshd" / "_vendor" / "_sync.py").exists()

    def test_install_without_hermes_edits_config_keeping_the_rest(self, hermes: Hermes) -> None:
        """No `hermes` on PATH: plugins.enabled is edited in place, every other line kept."""
        config = hermes.home / "config.yaml"
        before = (
            config.read_text() + "# a comment the user wrote\nplugins:\n  enabled:\n  - other\n"
        )
        config.write_text(before)

        done = hermes.install(path=False)

        assert done["enabled_by"] == "config.yaml"
        assert config.read_text() == before + "  - meshd\n"
        assert plugins(hermes)["meshd"]["status"] == "enabled"

    def test_the_vendored_client_loads_where_session_mesh_is_absent(self, hermes: Hermes) -> None:
        """Hermes's venv has no meshctl: the plugin imports its own copy, stamped."""
        hermes.install()

        done = hermes.python(
            """
            import importlib.util, json
            assert importlib.util.find_spec("meshctl") is None, "meshctl must not be importable"
            import model_tools
            from hermes_cli.plugins import get_plugin_manager
            [p] = [p for p in get_plugin_manager().list_plugins() if p["name"] == "meshd"]
            import hermes_plugins.meshd._vendor as v
            print(json.dumps({**p, "stamp": v.VERSION}))
            """
        )

        assert done.returncode == 0, done.stderr
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        from meshd import __version__

        assert loaded["error"] is None
        assert loaded["enabled"] is True
        assert loaded["commands"] == 1
        assert loaded["stamp"] == __version__ == loaded["version"]

    def test_the_vendored_client_decodes_long_replies_without_msgspec(self, hermes: Hermes) -> None:
        """The vendored wire layer carries the optional compiled decoder for long
        replies: where msgspec cannot be imported, buying it fails quietly and the
        standard library decodes every line, to the values json gives."""
        hermes.install()

        done = hermes.python(
            """
            import json, sys
            sys.modules["msgspec"] = None  # as in an environment without it
            import model_tools
            from hermes_cli.plugins import get_plugin_manager
            get_plugin_manager().list_plugins()
            from hermes_plugins.meshd._vendor import _conn
            result = {"sessions": [{"session_id": "s", "task": "t" * 60}] * 60}
            line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
            _conn._compiled.spent = _conn.BUY_AFTER
            reply = _conn.parse_line(line + b"\\n")
            print(json.dumps([len(line) >= _conn.BIG_LINE, reply.result == result,
                              repr(_conn._compiled.decode)]))
            """
        )

        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, True, "False"]


class TestForeignAndUninstall:
    def test_a_foreign_meshd_plugin_is_never_overwritten(self, hermes: Hermes) -> None:
        foreign = hermes.home / "plugins" / "meshd"
        foreign.mkdir(parents=True)
        (foreign / "plugin.yaml").write_text("name: meshd\nversion: 9\n")

        done = hermes.meshctl("hermes", "install")

        assert done.returncode == 1
        assert "did not install" in done.stderr
        assert (foreign / "plugin.yaml").read_text() == "name: meshd\nversion: 9\n"

    def test_uninstall_leaves_foreign_plugins_and_config_untouched(self, hermes: Hermes) -> None:
        other = hermes.home / "plugins" / "theirs"
        other.mkdir(parents=True)
        (other / "plugin.yaml").write_text("name: theirs\n")
        config = hermes.home / "config.yaml"
        config.write_text(config.read_text() + "plugins:\n  enabled: [theirs]\n")
        before = config.read_text()
        hermes.install(path=False)

        done = hermes.meshctl("hermes", "uninstall", path=False)

        assert done.returncode == 0, done.stderr
        assert not (hermes.home / "plugins" / "meshd").exists()
        assert (other / "plugin.yaml").read_text() == "name: theirs\n"
        assert config.read_text() == before

    def test_uninstall_after_hermes_enabled_it_leaves_no_trace_in_config(
        self, hermes: Hermes
    ) -> None:
        """`hermes plugins enable` also wrote plugins.entries.meshd: uninstall takes it out
        with the rest, and keeps what the person wrote."""
        config = hermes.home / "config.yaml"
        hermes.install()  # then the person (or an older meshctl) ran `hermes plugins enable`
        assert hermes.run("plugins", "enable", "meshd", "--no-allow-tool-override").returncode == 0
        assert "allow_tool_override" in config.read_text()
        config.write_text(config.read_text() + "# mine\n")

        done = hermes.meshctl("hermes", "uninstall")

        assert done.returncode == 0, done.stderr
        text = config.read_text()
        assert "meshd" not in text
        assert "# mine" in text
        assert "meshd" not in plugins(hermes)

    def test_uninstall_keeps_an_entry_the_person_configured(self, hermes: Hermes) -> None:
        config = hermes.home / "config.yaml"
        hermes.install()
        assert hermes.run("plugins", "enable", "meshd", "--no-allow-tool-override").returncode == 0
        text = config.read_text().replace(
            "allow_tool_override: false", "allow_tool_override: false\n      note: mine"
        )
        config.write_text(text)

        done = hermes.meshctl("hermes", "uninstall")

        assert done.returncode == 0, done.stderr
        assert "note: mine" in config.read_text()

    def test_status_flags_an_outdated_copy_and_install_updates_it(
        self, hermes: Hermes, daemon: DaemonHandle
    ) -> None:
        hermes.install()
        record = hermes.home / "plugins" / "meshd" / "meshd-install.json"
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "version": "0.0.1"}))

        stale = json.loads(hermes.meshctl("hermes", "status", "--json").stdout)[0]
        hermes.install()
        fresh = json.loads(hermes.meshctl("hermes", "status", "--json").stdout)[0]

        assert (stale["outdated"], stale["installed"], stale["enabled"]) == (True, True, True)
        assert stale["daemon_reachable"] is True
        assert fresh["outdated"] is False
        assert "OUTDATED" not in hermes.meshctl("hermes", "status").stdout


def test_all_profiles_reach_every_profile(hermes: Hermes, tmp_path: Path) -> None:
    """--all-profiles installs into the root home and every profiles/NAME."""
    root = Path(hermes.env["HOME"]) / ".hermes"
    (root / "profiles" / "worker1").mkdir(parents=True)
    env = {k: v for k, v in hermes.env.items() if k != "HERMES_HOME"}
    h = Hermes(home=root, bin=hermes.bin, env=env)

    done = h.meshctl("hermes", "install", "--all-profiles", "--json", path=False)

    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["hermes_profile"], r["profile"]) for r in rows] == [
        ("default", "default"),
        ("worker1", "worker1"),
    ]
    assert (root / "profiles" / "worker1" / "plugins" / "meshd" / "plugin.yaml").exists()


def test_install_says_how_to_start_each_profiles_daemon(hermes: Hermes) -> None:
    """The plugin never starts meshd: after --all-profiles, a profile whose daemon is
    not running (a Kanban worker's assignee) is named with the command that starts it."""
    root = Path(hermes.env["HOME"]) / ".hermes"
    (root / "profiles" / "worker1").mkdir(parents=True)
    env = {k: v for k, v in hermes.env.items() if k not in ("HERMES_HOME", "MESH_SOCKET")}
    h = Hermes(home=root, bin=hermes.bin, env=env)

    installed = h.meshctl("hermes", "install", "--all-profiles", path=False)
    status = h.meshctl("hermes", "status", "--all-profiles", path=False)

    assert installed.returncode == 0, installed.stderr
    assert "`meshctl daemon start --profile worker1`" in installed.stdout
    assert "`meshctl daemon start --profile default`" in installed.stdout
    assert "`meshctl daemon start --profile worker1`" in status.stdout


def test_the_entry_point_loads_the_plugin_when_session_mesh_is_in_hermes_env(
    hermes: Hermes, daemon: DaemonHandle, short_tmp: Path
) -> None:
    """session-mesh's own metadata (its hermes_agent.plugins entry point) on Hermes's path:
    `hermes plugins list` shows it from `entrypoint`, and it loads with no vendored copy."""
    import importlib.metadata
    import shutil

    dist = importlib.metadata.distribution("session-mesh")
    info = Path(str(dist.locate_file(f"session_mesh-{dist.version}.dist-info")))
    site = short_tmp / "site"
    shutil.copytree(info, site / info.name)
    hermes.env["PYTHONPATH"] = f"{site}:{Path(__file__).resolve().parents[2] / 'src'}"

    listed = plugins(hermes)["meshd"]
    enabled = hermes.run("plugins", "enable", "meshd", "--no-allow-tool-override")
    done = hermes.python(
        """
        import json, model_tools
        from hermes_cli.plugins import get_plugin_manager
        [p] = [p for p in get_plugin_manager().list_plugins() if p["name"] == "meshd"]
        import meshctl.hermes._client as c
        print(json.dumps({**p, "client": c.library().__name__}))
        """
    )

    assert listed["source"] == "entrypoint"
    assert enabled.returncode == 0, enabled.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert (loaded["source"], loaded["error"], loaded["client"]) == ("entrypoint", None, "meshctl")
    assert loaded["tools"] == 7  # the compact set
