"""``config.toml``: a ``[defaults]`` table and ``[profiles.NAME]`` overrides (SPEC §2).

Decoded with msgspec Structs that forbid unknown keys, so a typo is refused at
start with the file, the key and what was expected. Each profile table is
decoded on its own so the message names the profile (msgspec would otherwise
say ``$.profiles[...]``).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from meshd.core.settings import DEFAULT_SHARED_KINDS, FleetSettings, Settings
from meshd.core.work.jobs import JobSpec
from meshd.protocol.contract import is_profile

Pos = Annotated[float, Meta(gt=0)]
PosInt = Annotated[int, Meta(gt=0)]


class ConfigError(Exception):
    """The config file is unusable; the message names file, key and expectation."""


class Overrides(Struct, forbid_unknown_fields=True, kw_only=True):
    """Every key of SPEC §2; unset keys inherit."""

    enabled: bool | UnsetType = UNSET
    heartbeat_interval: Pos | UnsetType = UNSET
    stale_after: Pos | UnsetType = UNSET
    expire_after: Pos | UnsetType = UNSET
    visible_to_profiles: list[str] | UnsetType = UNSET
    accept_queries: bool | UnsetType = UNSET
    accept_messages: bool | UnsetType = UNSET
    message_budget_per_minute: PosInt | UnsetType = UNSET
    max_reply_depth: PosInt | UnsetType = UNSET
    max_query_timeout: Pos | UnsetType = UNSET
    preempt_grace: Pos | UnsetType = UNSET
    max_body_bytes: PosInt | UnsetType = UNSET
    snapshot_interval: Pos | UnsetType = UNSET
    history_days: Pos | UnsetType = UNSET
    max_connections: PosInt | UnsetType = UNSET
    idle_timeout: Pos | UnsetType = UNSET


class _Job(Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``[jobs.NAME]`` table (SPEC §7 "Jobs")."""

    resources: list[str]
    policy: Literal["wait", "skip"] = "wait"
    timeout: Pos = 900.0
    critical: bool = False
    once: Literal["daily", "hourly", ""] = ""


JOB_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Fleet(Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``[fleet]`` table (SPEC §12), as written; :func:`_fleet` checks the values."""

    url: str | list[str]
    creds: str | None = None
    nkey: str | None = None
    tls_ca: str | None = None
    name: str | None = None
    shared_kinds: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_SHARED_KINDS))
    shared_paths: list[str] = []
    on_partition: Literal["fail", "local"] = "fail"


class _File(Struct, forbid_unknown_fields=True):
    defaults: Overrides = msgspec.field(default_factory=Overrides)
    profiles: dict[str, Any] = {}
    jobs: dict[str, Any] = {}
    fleet: Any = None


_UNKNOWN = re.compile(r"^Object contains unknown field `(.*)`$")


def _explain(path: Path, err: msgspec.ValidationError, prefix: str) -> ConfigError:
    msg = str(err)
    head, sep, where = msg.rpartition(" - at `")
    if not sep:
        head, where = msg, "$"
    key = where.rstrip("`").removeprefix("$").lstrip(".")
    key = f"{prefix}.{key}" if prefix and key else (prefix or key)
    if (unknown := _UNKNOWN.match(head)) is not None:
        return _unknown_key(path, key, unknown.group(1))
    return ConfigError(f"{path}: key `{key or '(top level)'}`: {head}")


def _unknown_key(path: Path, table: str, name: str) -> ConfigError:
    """An unknown key, with what was expected (SPEC §2): the keys its table takes and,
    for a typo, the near one it meant."""
    import difflib

    head = table.split(".", 1)[0]
    tables: dict[str, tuple[str, ...]] = {
        "": _File.__struct_fields__,
        "jobs": _Job.__struct_fields__,
        "fleet": _Fleet.__struct_fields__,
    }
    known = list(tables.get(head, Overrides.__struct_fields__))
    near = difflib.get_close_matches(name, known, n=1)
    key = f"{table}.{name}" if table else name
    where = f"[{table}]" if table else "the top level"
    if not table and name in Overrides.__struct_fields__:
        # ``enabled = false`` on the first line, as SPEC §2's table names the key
        hint = f"; `{name}` is a setting: put it under a `[defaults]` (or `[profiles.NAME]`) line"
    else:
        hint = f"; did you mean `{near[0]}`?" if near else ""
    return ConfigError(
        f"{path}: key `{key}`: unknown key; expected one of {', '.join(known)} in {where}{hint}"
    )


def _finite(path: Path, o: Overrides, prefix: str) -> Overrides:
    """Refuse ``inf`` (TOML has it; ``> 0`` lets it through): it went out on the wire as
    JSON ``null`` where a number is promised (``session.register``, ``mesh.info``).
    Refuse a ``visible_to_profiles`` entry that is neither ``"*"`` nor a profile name: it
    could never match (``"work, home"`` in one string, ``"* "``)."""
    for f in o.__struct_fields__:
        value = getattr(o, f)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: key `{prefix}.{f}`: Expected a finite number, got {value}")
    for name in [] if o.visible_to_profiles is UNSET else o.visible_to_profiles:
        if name != "*" and not is_profile(name):
            raise ConfigError(
                f"{path}: key `{prefix}.visible_to_profiles`: {name!r} is not a profile name "
                '(1-64 characters from A-Z a-z 0-9 _ . -) nor "*" (every profile); '
                'list one name a string: ["work", "home"]'
            )
    return o


def _apply(settings: Settings, o: Overrides) -> Settings:
    changes: dict[str, Any] = {
        f: getattr(o, f) for f in o.__struct_fields__ if getattr(o, f) is not UNSET
    }
    if "visible_to_profiles" in changes:
        changes["visible_to_profiles"] = tuple(changes["visible_to_profiles"])
    return msgspec.structs.replace(settings, **changes)


MAX_CONFIG_BYTES = 1 << 20
"""The largest config file read (1 MiB): a real one is a few KiB; anything bigger is
refused rather than read into memory (a link to ``/dev/zero`` never ends)."""

_KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


def read_config(path: Path) -> bytes | None:
    """The bytes of the config file, or None when there is none.

    Only a regular file (a symlink to one is fine) of at most
    :data:`MAX_CONFIG_BYTES` is read. It is opened non-blocking and checked with
    ``fstat`` before a byte is read, so a named pipe, a device, a folder or a socket
    at the path is refused with what it is, never waited on or read without end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise ConfigError(f"{path}: is {kind}; meshd reads its config only from a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(_too_big(path, f"is {st.st_size:,} bytes"))
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:  # the file may grow between fstat and read
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(_too_big(path, "grew while read"))
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _too_big(path: Path, what: str) -> str:
    return f"{path}: {what}; a config file is at most {MAX_CONFIG_BYTES:,} bytes (1 MiB)"


def load(path: Path, profile: str) -> Settings:
    """The effective settings of ``profile``; a missing file means all defaults.

    Blocking (the file is read, job keys are resolved): the running daemon calls it
    in a worker thread (:meth:`meshd.app.App.reload`)."""
    text = read_config(path)
    if text is None:
        return Settings()
    import tomllib  # only with a file to read: its import is 1.2 ms of a daemon's start

    try:
        raw = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        doc = msgspec.convert(raw, _File)
    except msgspec.ValidationError as exc:
        raise _explain(path, exc, "") from exc
    settings = _apply(Settings(), _finite(path, doc.defaults, "defaults"))
    for name, table in doc.profiles.items():
        if not is_profile(name):
            raise ConfigError(
                f"{path}: table `profiles.{name}`: a profile name is 1-64 characters from "
                "A-Z a-z 0-9 _ . - (this table would never apply)"
            )
        try:
            over = msgspec.convert(table, Overrides)
        except msgspec.ValidationError as exc:
            raise _explain(path, exc, f"profiles.{name}") from exc
        _finite(path, over, f"profiles.{name}")
        if name == profile:
            settings = _apply(settings, over)
    _check(path, settings)
    jobs = tuple(_job(path, name, table) for name, table in doc.jobs.items())
    if jobs:
        settings = msgspec.structs.replace(settings, jobs=jobs)
    if doc.fleet is not None:
        fleet = _fleet(path, doc.fleet)
        _one_side(path, jobs, fleet)
        settings = msgspec.structs.replace(settings, fleet=fleet)
    return settings


def _one_side(path: Path, jobs: tuple[JobSpec, ...], fleet: FleetSettings) -> None:
    """Refuse a job whose resources mix fleet-wide and local keys in this fleet: the
    daemon refuses such a set (``BAD_KEY``: its fencing tokens would come from two
    counters), so the job could never run. Said at load, with how to split it."""
    from meshd.fleet.claim_records import fleet_wide
    from meshd.keys import from_canonical

    for job in jobs:
        keys = [from_canonical(r) for r in job.resources]
        wide = [k for k in keys if fleet_wide(k, fleet.shared_kinds, fleet.shared_paths)]
        local = [k for k in keys if k not in wide]
        if wide and local:
            raise ConfigError(
                f"{path}: key `jobs.{job.name}.resources`: {wide[0].text} is fleet-wide "
                f"in [fleet] and {local[0].text} is local: a claim set is one or the other "
                "in a fleet (their fencing tokens come from different counters), so this "
                "job could never run; name only fleet-wide or only local keys (split it "
                "into two jobs, or change `fleet.shared_kinds`/`fleet.shared_paths`)"
            )


def _job(path: Path, name: str, table: Any) -> JobSpec:
    """Validate one ``[jobs.NAME]`` table: its keys, its policy, and every resource key."""
    from meshd.keys import canonical_key
    from meshd.protocol.errors import BadKey

    if not JOB_NAME.match(name):
        raise ConfigError(
            f"{path}: table `jobs.{name}`: a job name is 1-64 characters from A-Z a-z 0-9 _ . -"
        )
    try:
        job = msgspec.convert(table, _Job)
    except msgspec.ValidationError as exc:
        err = _explain(path, exc, f"jobs.{name}")
        if "Invalid enum value" in str(err):
            want = "'wait' or 'skip'" if "policy" in str(err) else "'daily', 'hourly' or ''"
            err = ConfigError(f"{err}: expected {want}")
        raise err from exc
    if not job.resources:
        raise ConfigError(f"{path}: key `jobs.{name}.resources`: name at least one resource")
    keys = []
    for raw in job.resources:
        try:
            keys.append(canonical_key(raw, home=os.path.expanduser("~")).text)
        except BadKey as exc:
            raise ConfigError(f"{path}: key `jobs.{name}.resources`: {exc.message}") from exc
    return JobSpec(name, tuple(keys), job.policy, job.timeout, job.critical, job.once)


FLEET_SCHEMES = ("nats://", "tls://")
HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def default_host_name() -> str:
    """This machine's name as a fleet host name: the hostname, cut to the allowed set."""
    import socket

    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:64]
    return name or "host"


def _fleet(path: Path, table: Any) -> FleetSettings:
    """Validate the ``[fleet]`` table: its keys, its URLs, its files, kinds and folders."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `fleet` must be a table ([fleet])")
    try:
        f = msgspec.convert(table, _Fleet)
    except msgspec.ValidationError as exc:
        err = _explain(path, exc, "fleet")
        if "Invalid enum value" in str(err):
            err = ConfigError(f"{err}: expected 'fail' or 'local'")
        raise err from exc
    urls = (f.url,) if isinstance(f.url, str) else tuple(f.url)
    if not urls:
        raise ConfigError(f"{path}: key `fleet.url`: name at least one nats:// or tls:// URL")
    for url in urls:
        if not url.startswith(FLEET_SCHEMES) or len(url) <= len("tls://"):
            raise ConfigError(
                f"{path}: key `fleet.url`: {url!r} is not a NATS URL; expected "
                "nats://HOST:PORT or tls://HOST:PORT"
            )
    if f.creds is not None and f.nkey is not None:
        raise ConfigError(f"{path}: keys `fleet.creds` and `fleet.nkey`: give one, not both")
    files = {k: _fleet_file(path, k, getattr(f, k)) for k in ("creds", "nkey", "tls_ca")}
    name = f.name if f.name is not None else default_host_name()
    if not HOST_NAME.match(name):
        raise ConfigError(
            f"{path}: key `fleet.name`: {name!r}: a host name is 1-64 characters "
            "from A-Z a-z 0-9 _ . -"
        )
    kinds = _fleet_kinds(path, f.shared_kinds)
    folders = _fleet_paths(path, f.shared_paths)
    return FleetSettings(
        urls=urls, name=name, creds=files["creds"], nkey=files["nkey"],
        tls_ca=files["tls_ca"], shared_kinds=kinds, shared_paths=folders,
        on_partition=f.on_partition,
    )  # fmt: skip


def _fleet_kinds(path: Path, raw: list[str]) -> tuple[str, ...]:
    """``shared_kinds``: exact-match claim kinds (path keys are shared by folder)."""
    from meshd.keys import KINDS, PATH_KINDS

    allowed = sorted(KINDS - PATH_KINDS)
    for kind in raw:
        if kind not in allowed:
            hint = f" (list the folder in `fleet.shared_paths` to share {kind}: keys)"
            raise ConfigError(
                f"{path}: key `fleet.shared_kinds`: {kind!r} is not a claim kind that can be "
                f"fleet-wide; expected some of {', '.join(allowed)}"
                + (hint if kind in PATH_KINDS else "")
            )
    return tuple(dict.fromkeys(raw))


def _fleet_paths(path: Path, raw: list[str]) -> tuple[str, ...]:
    """``shared_paths``: absolute folders, made canonical as claim keys are."""
    folders = []
    for item in raw:
        p = os.path.expanduser(item)
        if not os.path.isabs(p):
            raise ConfigError(f"{path}: key `fleet.shared_paths`: {item!r} is not an absolute path")
        real = os.path.realpath(p)
        if real == "/":
            raise ConfigError(f"{path}: key `fleet.shared_paths`: `/` would share every file")
        try:  # fleet.status sends it; a key under it is refused BAD_KEY anyway (keys.py)
            real.encode("utf-8")
        except UnicodeEncodeError:
            shown = real.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ConfigError(
                f'{path}: key `fleet.shared_paths`: {item!r} resolves to "{shown}", '
                "a name that is not UTF-8; rename it or share another folder"
            ) from None
        folders.append(real)
    return tuple(dict.fromkeys(folders))


def _fleet_file(path: Path, key: str, raw: str | None) -> str | None:
    """A file the fleet link reads (creds, nkey seed, CA): absolute, and there now."""
    if raw is None:
        return None
    p = os.path.expanduser(raw)
    if not os.path.isabs(p):
        raise ConfigError(f"{path}: key `fleet.{key}`: {raw!r} is not an absolute path")
    if not os.path.isfile(p):
        raise ConfigError(f"{path}: key `fleet.{key}`: {raw!r}: no such file")
    return p


def _check(path: Path, s: Settings) -> None:
    if s.stale_after > s.expire_after:
        raise ConfigError(
            f"{path}: stale_after ({s.stale_after:g}) must not exceed expire_after "
            f"({s.expire_after:g})"
        )


def as_dict(s: Settings) -> dict[str, Any]:
    """Settings as plain data, for ``mesh.info``."""
    out = msgspec.structs.asdict(s)
    out["fleet"] = None if s.fleet is None else msgspec.structs.asdict(s.fleet)
    out["visible_to_profiles"] = list(s.visible_to_profiles)
    out["jobs"] = [j.name for j in s.jobs]
    return out
