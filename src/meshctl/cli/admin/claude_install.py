"""``meshctl claude install|uninstall|status``: Claude Code's hooks and MCP server.

Where (Claude Code's own scopes):

- ``--project DIR`` (the default, DIR the current folder): the hooks go into
  ``DIR/.claude/settings.local.json`` (personal, not committed: the commands name
  this machine's Python) and the MCP server into ``~/.claude.json`` under
  ``projects[DIR].mcpServers`` (Claude Code's *local* scope, which needs no approval).
- ``--user``: the hooks into ``~/.claude/settings.json``, the MCP server into
  ``~/.claude.json``'s top-level ``mcpServers``.

Every edit is a splice (:mod:`.json_splice`): one group per hook event appended to
that event's list, one member for the server; nothing else in the file moves. Install
records the settings file as it was and as it wrote it (``<state>/claude-install.json``);
uninstall gives the exact bytes back when nobody touched the file since, and otherwise
takes out only what install added, so edits made in between survive. A hook or server
is ours when its command runs ``meshctl/claude/hook.py`` or ``meshctl mcp``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from meshctl._core import env as _env
from meshctl.cli.admin import json_splice as js

SERVER = "session-mesh"
WRITES = "Write|Edit|MultiEdit|NotebookEdit"
#: The events hooked, with their matcher (None: the event has none).
EVENTS: tuple[tuple[str, str | None], ...] = (
    ("SessionStart", None),
    ("UserPromptSubmit", None),
    ("PreToolUse", WRITES),
    ("PostToolUse", WRITES + "|Read"),
    ("Stop", None),
    ("SessionEnd", None),
)
HOOK_MARK = "meshctl/claude/hook.py"
RECORD = "claude-install.json"


class InstallError(Exception):
    """Install or uninstall refused; the message says why and what to do."""


# --- what is written -----------------------------------------------------------------


def hook_file() -> str:
    import meshctl.claude

    return os.path.join(os.path.dirname(meshctl.claude.__file__), "hook.py")


def hook_command(profile: str | None) -> str:
    """The shell command Claude Code runs for every hook (``python -S``: no site, fast)."""
    cmd = shlex.join([sys.executable, "-S", hook_file()])
    return f"MESH_PROFILE={shlex.quote(profile)} {cmd}" if profile else cmd


def server_entry(profile: str | None) -> dict[str, Any]:
    """The MCP server's entry: ``meshctl mcp`` as the Claude Code session."""
    entry: dict[str, Any] = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "meshctl", "mcp", "--source", "claude-code"],
    }
    if profile:
        entry["env"] = {"MESH_PROFILE": profile}
    return entry


def hook_group(matcher: str | None, command: str) -> dict[str, Any]:
    group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
    group["hooks"] = [{"type": "command", "command": command, "timeout": 10}]
    return group


def is_ours(group: Any) -> bool:
    """Whether a hook group is one install wrote (every command runs our hook)."""
    hooks = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(hooks, list) or not hooks:
        return False
    return all(isinstance(h, dict) and HOOK_MARK in str(h.get("command", "")) for h in hooks)


# --- where -----------------------------------------------------------------------------


def claude_json() -> Path:
    """Claude Code's own state file (MCP servers of the user and local scopes)."""
    config_dir = _env.get("CLAUDE_CONFIG_DIR")
    if config_dir:
        return Path(config_dir) / ".claude.json"
    return Path.home() / ".claude.json"


def targets(project: str | None, user: bool) -> tuple[Path, Path, list[str]]:
    """(settings file, MCP file, the MCP servers' path in it) for the scope chosen."""
    if user:
        config_dir = _env.get("CLAUDE_CONFIG_DIR")
        base = Path(config_dir) if config_dir else Path.home() / ".claude"
        return base / "settings.json", claude_json(), ["mcpServers"]
    folder = os.path.realpath(project or os.getcwd())
    if not os.path.isdir(folder):
        raise InstallError(f"{folder} is not a folder")
    return (
        Path(folder) / ".claude" / "settings.local.json",
        claude_json(),
        ["projects", folder, "mcpServers"],
    )


# --- text edits ------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"cannot read {path}: {exc}") from exc


def _root(text: str, path: Path) -> js.Node:
    try:
        root = js.parse(text)
    except js.SpliceError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); fix it first") from exc
    if root.kind != "object":
        raise InstallError(f"{path} does not hold a JSON object; fix it first")
    return root


def ensure(text: str, path: Path, keys: list[str], value: Any) -> tuple[str, list[str] | None]:
    """``text`` with ``value`` at ``keys`` (creating the objects on the way), and the
    path of the outermost object created (None when all existed)."""
    root = _root(text, path)
    node = root
    for depth, key in enumerate(keys):
        child = node.get(key)
        if child is None:
            wrapped = value
            for k in reversed(keys[depth + 1 :]):
                wrapped = {k: wrapped}
            return js.insert(text, node, wrapped, key), keys[: depth + 1]
        if depth == len(keys) - 1:
            if child.kind != "array":
                raise InstallError(f"{path}: {'.'.join(keys)} is not a list; fix it first")
            return js.insert(text, child, value), None
        if child.kind != "object":
            raise InstallError(f"{path}: {'.'.join(keys[: depth + 1])} is not an object")
        node = child
    return text, None


def add_hooks(text: str, path: Path, command: str) -> tuple[str, list[list[str]]]:
    created: list[list[str]] = []
    for event, matcher in EVENTS:
        group = hook_group(matcher, command)
        root = _root(text, path)
        hooks = root.get("hooks")
        if hooks is None:
            text, made = ensure(text, path, ["hooks", event], [group])
        elif hooks.kind != "object":
            raise InstallError(f"{path}: hooks is not an object; fix it first")
        elif hooks.get(event) is None:
            text, made = ensure(text, path, ["hooks", event], [group])
        else:
            text, made = ensure(text, path, ["hooks", event], group)
        if made:
            created.append(made)
    return text, created


def remove_hooks(text: str, path: Path, created: list[list[str]] | None) -> str:
    """``text`` without our hook groups; containers install created go when empty
    (without a record: any that our removal left empty)."""
    made = {tuple(c) for c in created} if created is not None else None
    for event, _ in EVENTS:
        while True:
            root = _root(text, path)
            hooks = root.get("hooks")
            groups = hooks.get(event) if hooks is not None and hooks.kind == "object" else None
            if groups is None or groups.kind != "array":
                break
            ours = [i for i, (_, _, g) in enumerate(groups.items) if is_ours(g.plain(text))]
            if ours:
                text = js.remove(text, groups, ours[-1])
                continue
            if not groups.items and (made is None or ("hooks", event) in made
                                     or ("hooks",) in made):  # fmt: skip
                assert hooks is not None
                text = js.remove(text, hooks, _index(hooks, event))
            break
    root = _root(text, path)
    hooks = root.get("hooks")
    gone = hooks is not None and hooks.kind == "object" and not hooks.items
    if gone and (made is None or ("hooks",) in made):
        text = js.remove(text, root, _index(root, "hooks"))
    return text


def _index(node: js.Node, key: str) -> int:
    return max(i for i, (k, _, _) in enumerate(node.items) if k == key)


def installed_events(text: str | None) -> list[str]:
    if text is None:
        return []
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    if not isinstance(hooks, dict):
        return []
    return [e for e, _ in EVENTS if any(is_ours(g) for g in hooks.get(e) or [])]


# --- the install record ------------------------------------------------------------------


def _record_path() -> Path:
    from meshctl import _paths

    return Path(_paths.state_dir_str()) / RECORD


def _records() -> dict[str, Any]:
    try:
        data = json.loads(_record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_records(records: dict[str, Any]) -> None:
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".meshctl-tmp")
    tmp.write_text(text, encoding="utf-8")
    with contextlib.suppress(FileNotFoundError):
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)


# --- the commands ------------------------------------------------------------------------


def install(project: str | None, user: bool, profile: str | None) -> dict[str, Any]:
    """Hooks and MCP server in; returns what was done (for the CLI to print)."""
    settings, mcp_file, mcp_keys = targets(project, user)
    if installed_events(_read(settings)):
        uninstall(project, user)
    original = _read(settings)
    dir_created = not settings.parent.exists()
    text = original if original is not None else "{}\n"
    text, created = add_hooks(text, settings, hook_command(profile))
    _write(settings, text)
    records = _records()
    records[str(settings)] = {"original": original, "installed": text, "created": created,
                              "dir_created": dir_created}  # fmt: skip
    _save_records(records)
    mcp_text = _read(mcp_file)
    mcp_text = mcp_text if mcp_text is not None else "{}\n"
    mcp_text = _drop_server(mcp_text, mcp_file, mcp_keys)
    mcp_text = _nest(mcp_text, mcp_file, mcp_keys, server_entry(profile))
    _write(mcp_file, mcp_text)
    return {"settings": str(settings), "events": [e for e, _ in EVENTS],
            "mcp_file": str(mcp_file), "mcp_server": SERVER}  # fmt: skip


def _nest(text: str, path: Path, keys: list[str], entry: Any) -> str:
    """Create the missing objects down to ``keys`` with the server in the last one."""
    root = _root(text, path)
    node = root
    for depth, key in enumerate(keys):
        child = node.get(key)
        if child is None:
            wrapped: Any = {SERVER: entry}
            for k in reversed(keys[depth + 1 :]):
                wrapped = {k: wrapped}
            return js.insert(text, node, wrapped, key)
        if child.kind != "object":
            raise InstallError(f"{path}: {'.'.join(keys[: depth + 1])} is not an object")
        node = child
    return js.insert(text, node, entry, SERVER)


def _drop_server(text: str, path: Path, keys: list[str]) -> str:
    root = _root(text, path)
    servers = js.find(root, keys)
    if servers is None or servers.kind != "object" or servers.get(SERVER) is None:
        return text
    return js.remove(text, servers, _index(servers, SERVER))


def uninstall(project: str | None, user: bool) -> dict[str, Any]:
    """Take out what install put in; the settings file as before when untouched since."""
    settings, mcp_file, mcp_keys = targets(project, user)
    records = _records()
    record = records.pop(str(settings), None)
    current = _read(settings)
    restored = "unchanged"
    if current is not None:
        if isinstance(record, dict) and current == record.get("installed"):
            original = record.get("original")
            if original is None:
                settings.unlink()
                if record.get("dir_created"):
                    _rmdir_if_empty(settings.parent)
                restored = "removed (install created it)"
            else:
                _write(settings, str(original))
                restored = "restored byte for byte"
        elif installed_events(current):
            created = record.get("created") if isinstance(record, dict) else None
            text = remove_hooks(current, settings, created)
            if isinstance(record, dict) and record.get("original") is None and _empty(text):
                settings.unlink()
                restored = "removed (install created it)"
            else:
                _write(settings, text)
                restored = "our hooks removed, your edits kept"
    if record is not None:
        _save_records(records)
    mcp_text = _read(mcp_file)
    if mcp_text is not None:
        dropped = _drop_server(mcp_text, mcp_file, mcp_keys)
        if dropped != mcp_text:
            _write(mcp_file, dropped)
    return {"settings": str(settings), "settings_result": restored, "mcp_file": str(mcp_file)}


def _empty(text: str) -> bool:
    try:
        return bool(json.loads(text) == {})
    except ValueError:
        return False


def _rmdir_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def status(project: str | None, user: bool) -> dict[str, Any]:
    """What is installed where (no daemon needed)."""
    settings, mcp_file, mcp_keys = targets(project, user)
    events = installed_events(_read(settings))
    mcp_text = _read(mcp_file)
    server = None
    if mcp_text is not None:
        try:
            doc: Any = json.loads(mcp_text)
            for key in mcp_keys:
                doc = doc.get(key) if isinstance(doc, dict) else None
            server = doc.get(SERVER) if isinstance(doc, dict) else None
        except ValueError:
            server = None
    return {"settings": str(settings), "hooks": events,
            "missing_hooks": [e for e, _ in EVENTS if e not in events],
            "mcp_file": str(mcp_file), "mcp_server": server,
            "hook_file": hook_file(), "hook_file_exists": os.path.exists(hook_file())}  # fmt: skip
