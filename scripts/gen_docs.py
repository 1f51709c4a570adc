"""Generate docs/CLI.md (from the click tree) and docs/PROTOCOL.md (from mesh.schema).

Both references are generated so they cannot drift from the code: a test
(``tests/test_docs_generated.py``) generates them again and fails when the
committed files differ. Run after changing a command or a method::

    .venv/bin/python scripts/gen_docs.py          # rewrite both files
    .venv/bin/python scripts/gen_docs.py --check  # exit 1 if either is stale

The protocol reference asks a real daemon (started here in a temp folder) for its
``mesh.schema``: the document is what the daemon serves, nothing hand-kept.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "CLI.md"
PROTOCOL_MD = ROOT / "docs" / "PROTOCOL.md"
WIDTH = 100


# --- the CLI reference --------------------------------------------------------------


def _walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    ctx = click.Context(cmd, info_name=path[-1], parent=parent, terminal_width=WIDTH,
                        max_content_width=WIDTH)  # fmt: skip
    name = " ".join(path)
    out = [f"## `{name}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    if isinstance(cmd, click.Group):
        for sub in cmd.list_commands(ctx):
            child = cmd.get_command(ctx, sub)
            if child is not None and not child.hidden:
                out += _walk(child, [*path, sub], ctx)
    return out


def cli_reference() -> str:
    from meshctl.cli import cli

    head = [
        "# `meshctl` command reference",
        "",
        "Generated from the click command tree by `scripts/gen_docs.py`; do not edit by",
        "hand (a test fails when it drifts). Every command also takes `--profile`,",
        "`--socket`, `--session` and `--json`; exit codes: 0 done, 75 held or timed out,",
        "1 error, 2 usage error, 69 daemon unreachable (see README.md).",
        "",
    ]
    return "\n".join(head + _walk(cli, ["meshctl"], None)).rstrip() + "\n"


# --- the protocol reference ---------------------------------------------------------


def _schema() -> dict[str, Any]:
    """``mesh.schema`` from a real daemon started in a private temp folder."""
    root = Path(tempfile.mkdtemp(prefix="gd-", dir="/tmp"))
    try:
        run = root / "run"
        run.mkdir(mode=0o700)
        sock = run / "meshd" / "docs.sock"
        env = {
            **os.environ,
            "MESH_SOCKET": str(sock),
            "MESH_STATE_DIR": str(root / "state"),
            "MESH_CONFIG": str(root / "config.toml"),
            "XDG_RUNTIME_DIR": str(run),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshd", "run", "--profile", "docs"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            return _ask(sock, "mesh.schema")
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ask(sock: Path, method: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
                s.sendall(
                    json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}).encode() + b"\n"
                )
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    buf += chunk
            result: dict[str, Any] = json.loads(buf)["result"]
            return result
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return f"[{spec['$ref'].rsplit('/', 1)[1]}](#{spec['$ref'].rsplit('/', 1)[1].lower()})"
    if "anyOf" in spec:
        return " \\| ".join(_type(s) for s in spec["anyOf"])
    if "enum" in spec:
        return " \\| ".join(json.dumps(v) for v in spec["enum"])
    if "const" in spec:
        return json.dumps(spec["const"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    limits = [f"{k} {spec[k]}" for k in ("minimum", "maximum", "maxLength") if k in spec]
    return f"{kind} ({', '.join(limits)})" if limits else str(kind)


def _struct(name: str, spec: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if spec.get("description"):
        out += [" ".join(spec["description"].split()), ""]
    props = spec.get("properties") or {}
    if not props:
        return [*out, "(no fields)", ""]
    required = set(spec.get("required") or [])
    out += ["| field | type | required | default |", "|---|---|---|---|"]
    for field, fspec in props.items():
        default = json.dumps(fspec["default"]) if "default" in fspec else ""
        req = "yes" if field in required else ""
        out.append(f"| `{field}` | {_type(fspec)} | {req} | {default} |")
    return [*out, ""]


def protocol_reference(schema: dict[str, Any] | None = None) -> str:
    schema = schema or _schema()
    defs = schema.get("$defs") or {}
    head = [
        "# Protocol reference",
        "",
        "Generated from the daemon's own `mesh.schema` by `scripts/gen_docs.py`; do not",
        "edit by hand (a test fails when it drifts). The wire is JSON-RPC 2.0, one",
        "compact JSON value per line over the profile's Unix socket (README.md, SPEC §3);",
        "mesh errors carry a stable `data.code` (`src/meshd/protocol/errors.py`).",
        "",
        "## Methods",
        "",
        "| method | summary | params | result |",
        "|---|---|---|---|",
    ]
    for name, m in sorted(schema["methods"].items()):
        head.append(
            f"| `{name}` | {m.get('summary', '')} | {_type(m['params'])} | {_type(m['result'])} |"
        )
    body = ["", "## Types", ""]
    for name in sorted(defs):
        body += _struct(name, defs[name])
    return "\n".join(head + body).rstrip() + "\n"


def main(argv: list[str]) -> int:
    for var in [v for v in os.environ if v.startswith("MESH_")]:
        del os.environ[var]  # the help shows defaults, never this shell's environment
    wanted = {CLI_MD: cli_reference(), PROTOCOL_MD: protocol_reference()}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run scripts/gen_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
