"""``claim_bucket.together``: the writes of one claim or release, run at once."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from meshd.fleet.claim_bucket import together


async def _fails_later(exc: BaseException) -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    raise exc


async def _fails_now(exc: BaseException) -> None:
    raise exc


def test_every_failure_is_retrieved_when_the_first_write_fails() -> None:
    """The first write failing with an error its caller does not catch, and the second
    failed already: the first's error is raised, and the second's is retrieved, never
    logged as "Task exception was never retrieved" when its task is collected."""
    unretrieved: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx))
        with pytest.raises(ValueError, match="first"):
            await together(_fails_later(ValueError("first")), _fails_now(RuntimeError("second")))
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()

    assert [c.get("message") for c in unretrieved] == []


def test_all_run_and_the_first_error_is_raised_after_the_others_end() -> None:
    done: list[str] = []

    async def ok(name: str) -> None:
        await asyncio.sleep(0)
        done.append(name)

    async def main() -> None:
        await together(ok("a"), ok("b"), ok("c"))
        assert sorted(done) == ["a", "b", "c"]
        with pytest.raises(KeyError):
            await together(_fails_later(KeyError("x")), ok("d"))

    asyncio.run(main())
