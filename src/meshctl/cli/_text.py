"""Text that cannot go on the wire: undecodable argv bytes.

Python hands undecodable argv bytes over as lone surrogates (PEP 383), which cannot
be encoded as UTF-8 JSON. :func:`check_text` refuses them before a request is sent:
a key made of them as ``BAD_KEY`` (mesh keys are text; the bytes are shown as
``\\xe9``), any other text as a usage error naming its argument
(:func:`meshctl.cli._params.argument_for`).

Standard library only (no click): :class:`meshctl.cli._state.State` calls it on
every request, also on the fast path.
"""

from __future__ import annotations

from meshctl._conn import key_field, strings, undecodable
from meshctl.cli import _output
from meshd.protocol.errors import BadKey

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    import click


def check_text(params: Any, ctx: click.Context | None) -> None:
    """Refuse params holding text that cannot go on the wire (undecodable argv bytes).

    The first such string decides: in a key field it is ``BAD_KEY`` (exit 1, as
    the daemon would say of a bad key), elsewhere a usage error (exit 2) naming
    the argument it came from.
    """
    for path, text in strings(params):
        if not undecodable(text):
            continue
        shown = _output.safe(text)
        if key_field(path):
            raise _output.Failure(
                f"bad resource key '{shown}': it is not valid UTF-8 (keys are text); "
                "rename the file, or claim the folder that holds it",
                "BAD_KEY",
                code=BadKey.code,
                data={"key": shown},
                hint="",
            )
        where = path
        if ctx is not None:
            from meshctl.cli._params import argument_for

            where = argument_for(path, ctx) or path
        raise _output.Failure(
            f"{where}: '{shown}' is not valid UTF-8 text",
            "USAGE",
            code=_output.USAGE_CODE,
            exit_code=_output.EXIT_USAGE,
            data={"argument": where},
            hint="",
        )
