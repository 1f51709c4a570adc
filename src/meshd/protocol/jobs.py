"""Params and results of the ``job.*`` methods: declared jobs and their radar (SPEC §7).

Jobs are declared in ``config.toml`` (``[jobs.NAME]``); the daemon is the one
reader of that file, so ``meshctl job run`` asks it for the declaration
(``job.get``) and reports what happened to the run (``job.start``, ``job.end``,
``job.defer``). ``job.list`` is the radar; ``job.wait`` answers when a running job
ends. An unknown job name is ``NOT_FOUND`` with ``data.known`` listing the
declared ones. Times are RFC 3339 strings in UTC.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from meshd.protocol.methods import MethodSpec, Params, Result, SessionId

JobName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class JobGetParams(Params):
    """One declared job, by name."""

    name: JobName


class JobDecl(Result):
    """A ``[jobs.NAME]`` table: resources are canonical keys."""

    name: str
    resources: list[str]
    policy: str
    timeout: float
    critical: bool
    once: str


class JobStartParams(Params):
    """A run of ``name`` started under ``session_id`` (its claims are granted)."""

    name: JobName
    session_id: SessionId


class JobEndParams(Params):
    """The run under ``session_id`` ended; ``exit`` is COMMAND's status (0 clears
    the job's pending deferrals)."""

    name: JobName
    session_id: SessionId
    exit: Annotated[int, Meta(ge=0, le=255)]


class JobDeferParams(Params):
    """The run did not start: its resources were held (``holders`` as ``claim`` says)."""

    name: JobName
    session_id: SessionId
    holders: Annotated[list[dict[str, Any]], Meta(max_length=100)] = []


class JobEventResult(Result):
    name: str
    kind: str
    at: str
    session_id: str
    exit: int | None = None
    outcome: str = ""
    holders: list[dict[str, Any]] = []


class JobListParams(Params):
    """The radar; ``name`` narrows it to one job."""

    name: JobName | None = None


class JobRow(Result):
    """One job on the radar. ``declared`` is false for a job that ran but is no
    longer in the config. ``would_wait_for``: who holds its resources right now.
    ``pending``: deferrals of a critical job since it last succeeded (never silent)."""

    name: str
    declared: bool
    resources: list[str] = []
    policy: str = ""
    critical: bool = False
    once: str = ""
    running: JobEventResult | None = None
    last_start: JobEventResult | None = None
    last_end: JobEventResult | None = None
    deferrals: int = 0
    pending: list[JobEventResult] = []
    would_wait_for: list[dict[str, Any]] = []


class JobListResult(Result):
    jobs: list[JobRow] = []


class JobWaitParams(Params):
    """Answer when the running run of ``name`` ends, or after ``timeout`` seconds
    (at most ``max_query_timeout``); at once when it is not running."""

    name: JobName
    timeout: Annotated[float, Meta(ge=0)] = 60.0


class JobWaitResult(Result):
    """``ended``: a run ended while waiting; ``timed_out``: it still runs."""

    name: str
    was_running: bool
    ended: bool
    timed_out: bool
    last_end: JobEventResult | None = None


JOB_GET = MethodSpec("job.get", JobGetParams, JobDecl, "One declared job.")
JOB_START = MethodSpec("job.start", JobStartParams, JobEventResult, "A job's run started.")
JOB_END = MethodSpec("job.end", JobEndParams, JobEventResult, "A job's run ended.")
JOB_DEFER = MethodSpec("job.defer", JobDeferParams, JobEventResult, "A job's run was deferred.")
JOB_LIST = MethodSpec("job.list", JobListParams, JobListResult, "The jobs radar.")
JOB_WAIT = MethodSpec("job.wait", JobWaitParams, JobWaitResult, "Wait for a running job to end.")
