"""Every method's params and result, as msgspec Structs: the source of ``mesh.schema``.

The server decodes params with exactly these types, so the schema it publishes
cannot drift from what it accepts. Rules (msgspec ``schema-evolution``): request
structs forbid unknown fields; new fields get defaults and go at the end; a field
never changes type. Struct docstrings become schema descriptions.

Domains add their own modules (``claims``, ``messages`` …) that export a
``METHODS`` list of :class:`MethodSpec`; :data:`METHODS` here gathers them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

import msgspec
from msgspec import Meta, Struct

from meshd.protocol.events import ClaimLoss

Status = Literal[
    "idle",
    "thinking",
    "tool-running",
    "blocked",
    "waiting-for-user",
    "paused",
    "done",
    "errored",
]
Liveness = Literal["process", "heartbeat"]
SessionId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[^\s]+$")]
Seconds = Annotated[float, Meta(gt=0, le=31_536_000)]


class Params(Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """Base for request params: unknown fields are refused with their path."""


class Result(Struct, omit_defaults=False, kw_only=True):
    """Base for results."""


class MethodSpec(NamedTuple):
    """One method: its name, the params it decodes, the result it returns."""

    name: str
    params: type[Params]
    result: Any
    summary: str


# --- mesh.* ---------------------------------------------------------------------


class Empty(Params):
    """No params."""


class PingResult(Result):
    pong: bool = True
    time: float = 0.0


class Counts(Result):
    sessions: int = 0
    stale: int = 0
    connections: int = 0
    claims: int = 0
    waiters: int = 0
    signal_waits: int = 0
    """``signal.wait`` calls parked until an emit (``waiters`` counts claim waits)."""


class Limits(Result):
    """What bounds this daemon's connections: the most it takes at once (the smaller
    of ``max_connections`` and what the open-file limit leaves), that limit
    (RLIMIT_NOFILE) and the descriptors kept back from it."""

    connections: int = 0
    open_files: int = 0
    reserved_files: int = 0


class InfoResult(Result):
    """What this daemon is and holds. Clients check ``protocol_version`` once per connection."""

    version: str
    protocol_version: str
    capabilities: list[str]
    profile: str
    pid: int
    socket: str
    state_dir: str
    started_at: str
    uptime_s: float
    enabled: bool
    counts: Counts
    config: dict[str, Any] = {}
    limits: Limits | None = None


class ReloadResult(Result):
    reloaded: bool
    error: str | None = None
    config: dict[str, Any] = {}
    path: str | None = None
    """The config file this daemon reads (set at its start: ``MESH_CONFIG`` or the
    standard place), whether or not it exists."""


# --- session.* ------------------------------------------------------------------


class RegisterParams(Params):
    """Register (or refresh) a session. Over-long fields are refused with ``TOO_LARGE``;
    the id ``meshd`` (the sender of the daemon's own notices) with -32602."""

    session_id: SessionId | None = None
    source: str = "shell"
    task: str = ""
    status: Status = "idle"
    model: str = ""
    provider: str = ""
    pid: int | None = None
    host: str | None = None
    cwd: str | None = None
    repo: str | None = None
    branch: str | None = None
    worktree: str | None = None
    tools: list[str] = []
    parent: str | None = None
    slot: str | None = None
    kanban_task: str | None = None
    accept_queries: bool | None = None
    accept_messages: bool | None = None
    liveness: Liveness = "heartbeat"
    expire_after: Seconds | None = None
    bind: bool = False
    replace: bool = False
    """Take over a live ``heartbeat`` session that has no process (SPEC §4): it ends
    (``replaced``) and this is a new registration. Without it, ``ID_IN_USE``."""


class RegisterResult(Result):
    session_id: str
    refreshed: bool = False
    heartbeat_interval: float = 5.0
    stale_after: float = 20.0
    expire_after: float = 600.0
    liveness: Liveness = "heartbeat"
    disabled: bool = False


class HeartbeatParams(Params):
    """Say "still here", optionally with what changed. Only given fields change."""

    session_id: SessionId
    status: Status | None = None
    task: str | None = None
    cwd: str | None = None
    repo: str | None = None
    branch: str | None = None
    worktree: str | None = None
    tools: list[str] | None = None
    activity: str | None = None
    # Report the claim losses whose inbox notice id is above this (0: all recent ones).
    lost_after: Annotated[int, Meta(ge=0)] | None = None


class HeartbeatResult(Result):
    """``lost``: with ``lost_after``, the session's claim losses since then, oldest first:
    how a library handle learns its claim is gone within one heartbeat."""

    ok: bool = True
    disabled: bool = False
    lost: list[ClaimLoss] = []


class EndParams(Params):
    session_id: SessionId
    handoff: str | None = None
    reason: str = "ended"


class EndResult(Result):
    session_id: str
    ended: bool
    released: list[str] = []
    handoff_id: int | None = None
    disabled: bool = False


class PrioritizeParams(Params):
    """Set a session's rank (SPEC §5b): a person's command (``meshctl prioritize``);
    no library call or Hermes tool sends it. ``by``: who set it, as they name themselves."""

    session_id: SessionId
    rank: Annotated[int, Meta(ge=-100, le=100)]
    by: Annotated[str, Meta(max_length=200)] = ""


class PrioritizeResult(Result):
    session_id: str
    rank: int
    rank_by: str
    rank_at: str
    previous: int = 0


class AttachParams(Params):
    """Anchor a session to one more process: it lives while any of its processes lives.

    ``meshctl run`` anchors its session to itself and to COMMAND, so a SIGKILLed
    ``run`` does not free the claims COMMAND still uses.
    """

    session_id: SessionId
    pid: Annotated[int, Meta(gt=0)]


class AttachResult(Result):
    session_id: str
    pids: list[int]


class ClaimInfo(Result):
    resource: str
    mode: Literal["exclusive", "shared"]
    token: int
    since: str
    reason: str = ""
    local_only: bool = False  # fleet-wide key granted while the fleet was out of reach


LISTED_CLAIMS = 100
"""Claims per session in ``session.list`` (a session may hold 100,000s: the listing
says how many, and ``session.get`` / ``claim.list --session`` show them all)."""


class SessionInfo(Result):
    """A session as every listing shows it (``sessions active --json``)."""

    session_id: str
    profile: str
    source: str
    status: Status
    task: str
    cwd: str | None
    repo: str | None
    branch: str | None
    pid: int | None
    host: str
    last_heartbeat: str
    age_s: float
    stale: bool
    liveness: Liveness
    claims: list[ClaimInfo] = []
    claims_total: int = 0
    """How many claims the session holds; ``session.list`` shows at most
    ``LISTED_CLAIMS`` of them (oldest first), ``session.get`` all."""
    model: str = ""
    provider: str = ""
    worktree: str | None = None
    tools: list[str] = []
    parent: str | None = None
    slot: str | None = None
    kanban_task: str | None = None
    started_at: str = ""
    last_activity: str = ""
    accept_queries: bool = True
    accept_messages: bool = True
    rank: int = 0
    rank_by: str | None = None
    rank_at: str | None = None
    activity: str = ""
    idle_s: float = 0.0


class ListParams(Params):
    """List live sessions. ``for_profile``: the asking profile, for cross-profile visibility.
    With a fleet (SPEC §12) every host's sessions are listed; ``local``: this host's only."""

    fresh: bool = False
    for_profile: str | None = None
    local: bool = False


class ListResult(Result):
    profile: str
    visible: bool = True
    sessions: list[SessionInfo] = []


class GetParams(Params):
    session_id: SessionId


PING = MethodSpec("mesh.ping", Empty, PingResult, "Answer at once; the cheapest round trip.")
INFO = MethodSpec("mesh.info", Empty, InfoResult, "Version, protocol, capabilities, counts.")
SCHEMA = MethodSpec("mesh.schema", Empty, dict[str, Any], "JSON Schema of every method.")
RELOAD = MethodSpec("mesh.reload", Empty, ReloadResult, "Re-read config.toml (as SIGHUP does).")
REGISTER = MethodSpec("session.register", RegisterParams, RegisterResult, "Register or refresh.")
HEARTBEAT = MethodSpec(
    "session.heartbeat", HeartbeatParams, HeartbeatResult, "Keep alive; report what changed."
)
END = MethodSpec("session.end", EndParams, EndResult, "End a session, releasing everything.")
LIST = MethodSpec("session.list", ListParams, ListResult, "Live sessions of this profile.")
GET = MethodSpec("session.get", GetParams, SessionInfo, "One session.")
PRIORITIZE = MethodSpec(
    "session.prioritize", PrioritizeParams, PrioritizeResult,
    "Set a session's rank (a person's command): its waits are served by rank.",
)  # fmt: skip
ATTACH = MethodSpec(
    "session.attach", AttachParams, AttachResult, "Anchor a session to one more process."
)


def method_schema(specs: list[MethodSpec]) -> dict[str, Any]:
    """JSON Schema for each method's params and result (for ``mesh.schema``)."""
    types: list[Any] = []
    for spec in specs:
        types.extend((spec.params, spec.result))
    schemas, components = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    methods: dict[str, Any] = {}
    for i, spec in enumerate(specs):
        methods[spec.name] = {
            "summary": spec.summary,
            "params": schemas[2 * i],
            "result": schemas[2 * i + 1],
        }
    return {"methods": methods, "$defs": components}
