"""The ``mesh`` toolset in Hermes: :mod:`meshctl.agent`'s tools, called Hermes's way.

The tools themselves (names, descriptions, parameters, handlers) are defined once,
for every frontend, in :mod:`meshctl.agent.tools`; this module supplies their
:class:`~meshctl.agent.context.Context` from the plugin's runtime and adapts the
handlers to Hermes's ``handler(args, **kwargs) -> str`` (``session_id`` in the
kwargs). Which set the model sees (:data:`~meshctl.agent.tools.MODES`) is the
person's choice: ``plugins.entries.meshd.tools: full`` in the profile's
``config.yaml``, or ``MESH_HERMES_TOOLS=full``; the default is the compact set.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import _text
from ._agent import context, tools
from ._client import environment
from ._common import working_dir
from ._runtime import Runtime

log = logging.getLogger("meshd.hermes")
Handler = Callable[..., str]
#: Environment variable naming the tool set (overrides config.yaml).
MODE_ENV = "MESH_HERMES_TOOLS"
NOT_ON_MESH = "this session is not on the mesh (is meshd running?)"


def tool_mode(hermes_config: Mapping[str, Any] | None = None) -> str:
    """The tool set for this process: ``MESH_HERMES_TOOLS``, else
    ``plugins.entries.meshd.tools`` in Hermes's config, else ``compact``."""
    wanted = environment().get(MODE_ENV).strip().lower()
    if not wanted:
        cfg = hermes_config if hermes_config is not None else _hermes_config()
        plugins = cfg.get("plugins") if isinstance(cfg, Mapping) else None
        entries = plugins.get("entries") if isinstance(plugins, Mapping) else None
        entry = entries.get("meshd") if isinstance(entries, Mapping) else None
        wanted = str(entry.get("tools") or "") if isinstance(entry, Mapping) else ""
    wanted = wanted.strip().lower()
    return wanted if wanted in tools.MODES else tools.MODES[0]


def _hermes_config() -> Mapping[str, Any]:
    """Hermes's config of this profile (Hermes's own loader; empty when it fails)."""
    try:
        import importlib

        cfg = importlib.import_module("hermes_cli.config").load_config()
    except Exception:
        return {}
    return cfg if isinstance(cfg, Mapping) else {}


class HermesContext:
    """:class:`meshctl.agent.context.Context` for one tool call in Hermes."""

    def __init__(self, owner: Tools, session_id: str) -> None:
        self.owner = owner
        self.rt = owner.rt
        self._sid = session_id

    @property
    def session_id(self) -> str:
        return self._sid

    @property
    def cwd(self) -> str:
        return working_dir()

    def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        link = self.rt.link
        lib = link.lib
        if method == "message.ack":  # the model read these (mesh_inbox): not shown again
            self.rt.view.shown(
                self._sid, [i for i in params.get("ids") or [] if isinstance(i, int)]
            )
        try:
            return link.strict(method, params, timeout=timeout)
        except lib.MeshTimeout as exc:
            link.timed_out()
            raise context.Refused(link.not_answering(), "TIMEOUT") from exc
        except lib.MeshUnavailable:
            link.unreachable()
            return None
        except lib.MeshError as exc:
            data = getattr(exc, "data", None) or {}
            code = str(data.get("code") or getattr(exc, "data_code", "") or "")
            raise context.Refused(getattr(exc, "message", str(exc)), code, data) from exc
        except Exception:  # anything a daemon sent that the client could not take
            log.debug("meshd: %s failed", method, exc_info=True)
            link.unreachable()
            return None

    def has_method(self, method: str) -> bool:
        return bool(self.rt.link.has_method(method))

    def arrived(self) -> str:
        return ""  # Hermes's hooks deliver (pre_llm_call, transform_tool_result)

    def asker(self, query_id: int) -> str | None:
        return self.rt.askers.get(query_id)

    def claimed(self, ttl: float) -> None:
        self.owner.claim_ttl[self._sid] = ttl
        self.owner.refreshed[self._sid] = time.monotonic()


class Tools:
    """The handlers Hermes registers, bound to the runtime, for one tool set."""

    def __init__(self, rt: Runtime, mode: str = "compact") -> None:
        self.rt = rt
        self.mode = mode
        self.claim_ttl: dict[str, float] = {}  # session -> ttl of its tool claims
        self.refreshed: dict[str, float] = {}

    def registered(self) -> list[tools.Tool]:
        """The tools of this set."""
        return tools.tools_for(self.mode)

    def handler(self, name: str) -> Handler:
        """Hermes's ``handler(args, **kwargs)`` for tool ``name`` (of either set: ``/mesh``
        uses the full set's one-action tools whatever the model sees)."""

        def handle(args: Any = None, **kwargs: Any) -> str:
            sid = str(kwargs.get("session_id") or self.rt.last_session or "")
            t = self.rt.track(sid) if sid else None
            if t is None or not t.registered:
                return json.dumps({"error": NOT_ON_MESH})
            given = dict(args) if isinstance(args, Mapping) else {}
            return tools.run(HermesContext(self, sid), name, given, self.mode)

        handle.__name__ = name
        return handle

    # --- claim ttl refresh --------------------------------------------------------------

    def refresh_claims(self, sid: str) -> None:
        """On activity: re-acquire this session's tool claims so their ttl starts again."""
        ttl = self.claim_ttl.get(sid)
        if ttl is None or time.monotonic() - self.refreshed.get(sid, 0.0) < ttl / 3:
            return
        self.refreshed[sid] = time.monotonic()
        claims = self.rt.link.call("claim.list", {"session_id": sid})
        held = [c.get("resource") for c in (claims or {}).get("claims") or []]
        if held:
            self.rt.link.call("claim.acquire", {"session_id": sid, "resources": held, "ttl": ttl})


def framed_sessions(doc: Mapping[str, Any], me: str) -> str:
    """The ``/mesh sessions`` text for people."""
    sessions = list(doc.get("sessions") or [])
    if not sessions:
        return "No other live sessions on the mesh."
    return "\n".join(_text.session_line(s, me) for s in sessions)
