"""Floor N's responder: ``python -m bench.nats_echo URL`` answers ``bench.echo`` at once.

A plain nats-py subscription that replies with what it got: the NATS request/reply
round trip that a cross-host ask rides on, with nothing of ours in it.
"""

from __future__ import annotations

import asyncio
import sys

import nats
from nats.aio.msg import Msg


async def main(url: str) -> None:
    nc = await nats.connect(url)

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("bench.echo", cb=echo)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
