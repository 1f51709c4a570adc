"""The plugin's link to meshd: the blocking client with short timeouts, failing open.

Which client: the copy ``meshctl hermes install`` placed beside this plugin
(``_vendor``, stamped with the session-mesh version; Hermes usually lives in an
environment of its own that has no session-mesh), else the installed ``meshctl``
(the ``hermes_agent.plugins`` entry point). Both are standard library only.

Hermes gives hooks no timeout (0.19.0), so every call here has a short one, the
daemon is never started from inside Hermes, and an unreachable daemon makes every
call return None at once: the Link fails open and retries with backoff, so a
daemon that is down costs a hook one failed ``connect`` now and then, nothing more.
A daemon that accepts but does not answer (stopped, hung) costs one hook the
timeout, then every call is skipped for at least ``PAUSE_AFTER_TIMEOUT``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: Seconds a hook waits for one reply; Hermes waits for the hook. ``MESH_HERMES_TIMEOUT``
#: sets another (:func:`hook_timeout`).
HOOK_TIMEOUT = 0.5
#: How long the last answer to "is the mesh there?" is trusted (tools' check_fn).
AVAILABLE_TTL = 2.0
#: After a reply timed out, calls return None at once for this long (then doubling).
PAUSE_AFTER_TIMEOUT = 5.0
#: While the daemon is unreachable, calls are skipped for this long, doubling up to the max.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
log = logging.getLogger("meshd.hermes")
#: The file ``meshctl hermes install`` writes beside the plugin.
INSTALL_FILE = "meshd-install.json"


def library() -> ModuleType:
    """The blocking client: the vendored copy when installed as a folder, else meshctl."""
    package = __package__ or ""
    try:
        lib = importlib.import_module("._vendor", package)
    except ImportError:
        lib = importlib.import_module("meshctl")
    _quiet()
    return lib


def environment() -> ModuleType:
    """The client's one place for the environment (``meshctl._core.env``), from the
    same client as :func:`library`: the plugin reads no variable by itself."""
    package = __package__ or ""
    try:
        return importlib.import_module("._vendor._core_env", package)
    except ImportError:
        return importlib.import_module("meshctl._core.env")


def _quiet() -> None:
    """The client's "unreachable, continuing without it" goes to Hermes's logs, never to
    the terminal of a Hermes user (no lastResort stderr output when logging is unset)."""
    import logging

    logger = logging.getLogger("meshctl")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def hook_timeout() -> float:
    """Seconds one call may wait for meshd: ``MESH_HERMES_TIMEOUT``, else :data:`HOOK_TIMEOUT`.

    Short by design (a hook holds up the agent loop), but a machine under heavy load
    can take longer than 0.5 s to get a reply to a process at all; there a timeout
    pauses the plugin for seconds and Hermes's sessions miss the mesh meanwhile (the
    test suite on a loaded 2-core CI machine: sessions missing after their start
    hook). A value that is not a positive number is ignored.
    """
    try:
        value = float(environment().get("MESH_HERMES_TIMEOUT") or HOOK_TIMEOUT)
    except ValueError:
        return HOOK_TIMEOUT
    return value if 0 < value < float("inf") else HOOK_TIMEOUT


def listener(profile: str, socket: str | None, timeout: float | None = None) -> Any:
    """A connection of its own for pushed events (the client's ``Connection``), never
    starting the daemon; raises the client's ``MeshError`` when it cannot connect."""
    package = __package__ or ""
    try:
        mod = importlib.import_module("._vendor._blocking", package)
    except ImportError:
        mod = importlib.import_module("meshctl._blocking")
    return mod.Connection(profile, socket, autostart=False, timeout=timeout or hook_timeout())


def git_place(cwd: str) -> tuple[str | None, str | None, str | None]:
    """(repo, branch, worktree) of ``cwd``, read from files (no ``git`` subprocess)."""
    package = __package__ or ""
    try:
        mod = importlib.import_module("._vendor._git", package)
    except ImportError:
        mod = importlib.import_module("meshctl.cli._git")
    place = mod.git_place(cwd)
    return place.repo, place.branch, place.worktree


def claims_text() -> ModuleType:
    """The client's claim sentences (``held: … is editing … since 14:02 — why``), so
    ``/mesh claim`` speaks as ``meshctl claim`` does."""
    package = __package__ or ""
    try:
        return importlib.import_module("._vendor._claims", package)
    except ImportError:
        return importlib.import_module("meshctl._claims")


def version() -> str:
    """The session-mesh version of the client this plugin runs with."""
    lib = library()
    stamped = getattr(lib, "VERSION", None)
    if stamped:
        return str(stamped)
    from meshd import __version__

    return __version__


def install_record() -> dict[str, Any]:
    """What ``meshctl hermes install`` recorded beside this plugin (empty: entry point)."""
    path = os.path.join(os.path.dirname(__file__), INSTALL_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def where(hermes_profile: str) -> tuple[str, str | None]:
    """(mesh profile, socket or None) for this Hermes process.

    ``MESH_SOCKET`` first, then what the install recorded, then the standard socket of
    the profile named like the Hermes profile (SPEC §2; a home outside the standard
    place reports ``custom``, so its install records the profile to use).
    """
    record = install_record()
    env = environment()
    socket = env.get("MESH_SOCKET") or record.get("socket") or None
    profile = env.get("MESH_PROFILE") or record.get("profile") or hermes_profile
    if not profile or profile == "custom":
        profile = "default"
    return str(profile), socket


class Link:
    """Calls to meshd for hooks and tools: short timeouts, None while unreachable.

    One :class:`meshctl.Mesh` (no autostart) per Link. Hooks on several
    threads share it (a call that waits, like an ask, holds up no other thread's call);
    the heartbeat thread still keeps a Link of its own, so a hung daemon's timeout on a
    hook's call, and the pause that follows it (:meth:`timed_out`), never cost it a
    heartbeat. A timeout leaves the connection open (the client drops the late reply).
    """

    def __init__(self, profile: str, socket: str | None, timeout: float | None = None) -> None:
        self.lib = library()
        self.profile = profile
        self.socket = socket
        # Not the client's own fail_open: it turns a hung daemon's timeout into the same
        # None as an unreachable one, and this Link pauses longer after a timeout.
        self.timeout = timeout or hook_timeout()
        self.mesh: Any = self._new_mesh()
        self.disabled = False
        self._checked_at = -AVAILABLE_TTL
        self._available = False
        self._methods: set[str] | None = None
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self._backoff = BACKOFF_FIRST
        #: the last failure was a timeout: the daemon runs but does not answer
        self.hung = False
        #: requests sent (tests and the bench count what a hook asks on its path)
        self.calls = 0

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """The client's error base class, for ``except``."""
        return (self.lib.MeshError,)

    def call(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        forgotten: Callable[[], Any] | None = None,
    ) -> Any:
        """One request; None when the daemon is unreachable or said no (never raised).

        ``forgotten`` runs when the daemon does not know the session the call is for
        (it expired, or a restarted daemon lost it), so the caller can register again.
        A reply that times out pauses every call for a few seconds: a hung daemon must
        not cost each hook the whole timeout. Nothing a daemon sends raises out of
        here: a reply the client cannot take (nested too deep, not JSON, a
        ``RecursionError`` or ``MemoryError`` in its decode) counts as the daemon
        being unavailable, with the same back-off.
        """
        if self.down:
            return None
        lib = self.lib
        self.calls += 1
        try:
            result = self.mesh.call(method, params, timeout=timeout)
        except (lib.UnknownSession, lib.SessionExpired):
            if forgotten is not None:
                forgotten()
            return None
        except lib.MeshTimeout:
            self.timed_out()
            return None
        except lib.MeshUnavailable:
            self.unreachable()
            return None
        except lib.MeshError:
            return None
        except Exception:  # whatever the daemon sent, the plugin goes on (fail open)
            self._reset()
            self.unreachable()
            return None
        self._backoff = BACKOFF_FIRST
        self.hung = False
        return result

    def timed_out(self) -> None:
        """A reply did not come in time (daemon hung or stopped): a long pause, doubling
        like the backoff; :meth:`not_answering` says so to people."""
        self.hung = True
        self._backoff = max(self._backoff, PAUSE_AFTER_TIMEOUT)
        self._pause(self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def unreachable(self) -> None:
        """The daemon could not be reached (or sent what the client cannot take)."""
        self._pause(self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def _new_mesh(self) -> Any:
        return self.lib.Mesh(
            self.profile, self.socket, autostart=False, fail_open=False, timeout=self.timeout
        )

    def _reset(self) -> None:
        """After an unexpected failure (a reply the client could not take), a new
        connection for the next call: the old one may hold half a reply."""
        old, self.mesh = self.mesh, self._new_mesh()
        try:
            old.close()
        except Exception:
            log.debug("meshd: closing the link failed", exc_info=True)

    def not_answering(self) -> str:
        """The advice for a daemon that accepts but does not answer (it runs)."""
        return (
            "meshd is running but not answering (no reply in time): it may be stopped "
            "(SIGSTOP), overloaded or stuck. Check it with `meshctl doctor`; "
            "`meshctl daemon restart` restarts it."
        )

    def advice(self) -> str:
        """What to tell a person the mesh cannot be used: hung, or not running."""
        if self.hung:
            return f"Session Mesh: {self.not_answering()}"
        return "Session Mesh: meshd is not reachable (start it with `meshctl daemon start`)."

    @property
    def down(self) -> bool:
        """Whether calls are paused (the daemon was unreachable or hung a moment ago)."""
        return time.monotonic() < self._paused_until

    def _pause(self, seconds: float) -> None:
        self._paused_until = time.monotonic() + seconds

    def strict(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """One request for a tool: the daemon's refusals are raised (the tool reports them;
        :class:`._tools.HermesContext` turns every other failure into "unreachable")."""
        try:
            return self.mesh.call(method, params, timeout=timeout)
        except self.lib.MeshError:
            raise
        except Exception:
            self._reset()
            raise

    def available(self) -> bool:
        """Whether the daemon answers and the mesh is enabled (cached for a moment)."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < AVAILABLE_TTL:
                return self._available
            self._checked_at = now
        info = self.call("mesh.info")
        ok = isinstance(info, dict) and bool(info.get("enabled", True))
        with self._lock:
            self._available = ok
            self.disabled = isinstance(info, dict) and not info.get("enabled", True)
        return ok

    def has_method(self, name: str) -> bool:
        """Whether this daemon serves ``name`` (from ``mesh.schema``, asked once)."""
        if self._methods is None:
            schema = self.call("mesh.schema")
            if not isinstance(schema, dict):
                return False
            self._methods = set(schema.get("methods") or {})
        return name in self._methods

    def close(self) -> None:
        self.mesh.close()
