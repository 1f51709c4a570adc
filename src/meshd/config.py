"""``config.toml``: a ``[defaults]`` table and ``[profiles.NAME]`` overrides (SPEC §2).

Decoded with msgspec Structs that forbid unknown keys, so a typo is refused at
start with the file, the key and what was expected. Each profile table is
decoded on its own so the message names the profile (msgspec would otherwise
say ``$.profiles[...]``).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from meshd.core.jobs import JobSpec
from meshd.core.settings import Settings

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


class _File(Struct, forbid_unknown_fields=True):
    defaults: Overrides = msgspec.field(default_factory=Overrides)
    profiles: dict[str, Any] = {}
    jobs: dict[str, Any] = {}


def _explain(path: Path, err: msgspec.ValidationError, prefix: str) -> ConfigError:
    msg = str(err)
    head, sep, where = msg.rpartition(" - at `")
    if not sep:
        head, where = msg, "$"
    key = where.rstrip("`").removeprefix("$").lstrip(".")
    key = f"{prefix}.{key}" if prefix and key else (prefix or key or "(top level)")
    return ConfigError(f"{path}: key `{key}`: {head}")


def _apply(settings: Settings, o: Overrides) -> Settings:
    changes: dict[str, Any] = {
        f: getattr(o, f) for f in o.__struct_fields__ if getattr(o, f) is not UNSET
    }
    if "visible_to_profiles" in changes:
        changes["visible_to_profiles"] = tuple(changes["visible_to_profiles"])
    return replace(settings, **changes)


def load(path: Path, profile: str) -> Settings:
    """The effective settings of ``profile``; a missing file means all defaults."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        raw = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        doc = msgspec.convert(raw, _File)
    except msgspec.ValidationError as exc:
        raise _explain(path, exc, "") from exc
    settings = _apply(Settings(), doc.defaults)
    for name, table in doc.profiles.items():
        try:
            over = msgspec.convert(table, Overrides)
        except msgspec.ValidationError as exc:
            raise _explain(path, exc, f"profiles.{name}") from exc
        if name == profile:
            settings = _apply(settings, over)
    _check(path, settings)
    jobs = tuple(_job(path, name, table) for name, table in doc.jobs.items())
    return replace(settings, jobs=jobs) if jobs else settings


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


def _check(path: Path, s: Settings) -> None:
    if s.stale_after > s.expire_after:
        raise ConfigError(
            f"{path}: stale_after ({s.stale_after:g}) must not exceed expire_after "
            f"({s.expire_after:g})"
        )


def as_dict(s: Settings) -> dict[str, Any]:
    """Settings as plain data, for ``mesh.info``."""
    out = asdict(s)
    out["visible_to_profiles"] = list(s.visible_to_profiles)
    out["jobs"] = [j.name for j in s.jobs]
    return out
