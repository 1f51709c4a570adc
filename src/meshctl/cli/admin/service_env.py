"""The environment a service must carry: ``MESH_CONFIG``, ``MESH_STATE_DIR`` and
``MESH_SOCKET`` as set where ``meshctl service install`` runs.

A daemon meshctl starts on demand is given them (:meth:`meshctl._core.env.Environment.
passed`); a daemon the service manager starts sees none of the shell's variables, so
without this it would read the default config, keep its state elsewhere and listen on
the default socket while this shell's meshctl looks at the others. So the install
writes them where the manager reads them:

* systemd: a drop-in per profile, ``meshd@P.service.d/50-meshctl-environment.conf``
  (``Environment=``), and for ``MESH_SOCKET`` ``meshd@P.socket.d/…`` (``ListenStream=``
  reset, then the path), beside the shared templates; a later install from a shell
  without them removes the drop-ins, so the service is back on the defaults.
* launchd: ``EnvironmentVariables`` in the profile's LaunchAgent.

Each value must be an absolute path without control characters (a line break would
end the unit's line and start another); anything else is refused with the variable's
name, before a file is written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from meshctl._core import env as _env

NAMES = ("MESH_CONFIG", "MESH_STATE_DIR", "MESH_SOCKET")
DROPIN = "50-meshctl-environment.conf"
_WHAT = {"MESH_CONFIG": "config file", "MESH_STATE_DIR": "state folder", "MESH_SOCKET": "socket"}


class EnvironmentRefused(ValueError):
    """A variable the service cannot carry; the message names it and says why."""


def overrides() -> dict[str, str]:
    """The variables of :data:`NAMES` set (not empty) here, checked; in that order."""
    from meshd.protocol.trust import check_absolute

    out: dict[str, str] = {}
    for name in NAMES:
        value = _env.get(name)
        if not value:
            continue  # unset or empty: the daemon's default, as meshd reads it
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise EnvironmentRefused(
                f"{name} holds a control character ({value!r}): a service unit cannot "
                f"carry it; set {name} to a plain absolute path, or unset it"
            )
        try:
            check_absolute(value, name, _WHAT[name])
        except ValueError as exc:
            raise EnvironmentRefused(str(exc)) from exc
        out[name] = value
    return out


def dropin_paths(folder: Path, profile: str) -> list[Path]:
    """Where the systemd drop-ins of ``profile`` go (service first, then socket)."""
    return [folder / f"meshd@{profile}.{kind}.d" / DROPIN for kind in ("service", "socket")]


def _unit_value(value: str) -> str:
    """``value`` inside a double-quoted unit setting: ``%`` is a specifier, ``\\`` and
    ``"`` are escapes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def render_dropins(header: str, values: dict[str, str]) -> tuple[str | None, str | None]:
    """The service and socket drop-ins' text for ``values`` (None: no such drop-in)."""
    if not values:
        return None, None
    why = "# The environment `meshctl service install` ran with (unset it and install again\n"
    why += "# to go back to the defaults).\n"
    pairs = " ".join(f'"{k}={_unit_value(v)}"' for k, v in values.items())
    service = f"{header}{why}[Service]\nEnvironment={pairs}\n"
    socket = None
    if "MESH_SOCKET" in values:
        path = values["MESH_SOCKET"].replace("%", "%%")
        socket = f"{header}{why}[Socket]\nListenStream=\nListenStream={path}\n"
    return service, socket


def launchd_dict(values: dict[str, str], escape: Callable[[str], str]) -> str:
    """The LaunchAgent's ``EnvironmentVariables`` entry ("" when there is none);
    ``escape`` is the plist's XML escape."""
    if not values:
        return ""
    items = "".join(
        f"<key>{escape(k)}</key><string>{escape(v)}</string>" for k, v in values.items()
    )
    return f"  <key>EnvironmentVariables</key>\n  <dict>{items}</dict>\n"


def note(values: dict[str, str]) -> str:
    """What the person is told: the service runs with these, set in this shell."""
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return (
        f"the service runs with {shown}, as set in this shell "
        "(unset them and install again to go back to the defaults)"
    )
