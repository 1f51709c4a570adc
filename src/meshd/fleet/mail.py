"""Mail across hosts over NATS (docs/FLEET.md): the stream, the forwarder, the consumer
and the ask responder of one daemon. The rules are the mail desk's
(:class:`~meshd.ports.MailDesk`, :mod:`meshd.domains.fleet_mail`), reached through the port.

* **Stream** ``MESH_<profile>_MAIL`` on ``mesh.<profile>.mail.>`` (file storage, 7
  days, 2 min duplicate window), and this host's **durable pull consumer**
  ``host_<host>`` on its own mail subject and the one for every host.
* **Forwarder**: publishes the outbox in order, each row with ``Nats-Msg-Id``; a row
  goes only once JetStream acknowledged it. While the link is down rows wait.
* **Consumer**: takes each item in (:meth:`FleetMail.take`: stored with its key in one
  commit), *then* acks; an item it could not store is not acked and comes again.
* **Asks**: a plain NATS subscription on ``mesh.<profile>.ask.<host>``; each request is
  served in a task of its own (a live responder may take its whole timeout).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import nats.errors
import nats.js.errors
from anyio.abc import TaskGroup
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from meshd.fleet.link import FleetLink, describe
from meshd.fleet.registry import FleetRegistry
from meshd.ports import MailDesk
from meshd.protocol import fleet_mail as wire
from meshd.protocol import methods as m
from meshd.protocol.errors import StorageUnavailable

log = logging.getLogger("meshd.fleet.mail")

PUBLISH_TIMEOUT = 5.0
"""Seconds to wait for JetStream's acknowledgement of one outbox row before retrying."""
FETCH_WAIT = 5.0
"""Seconds one pull from the consumer waits for items (then it pulls again)."""
FETCH_BATCH = 64
ACK_WAIT = 30.0
"""Seconds JetStream waits for this host's ack before it delivers an item again."""
POISON_RETRY = 60.0
"""Seconds before an item whose taking failed for another reason than storage comes again."""
RETRY = 1.0
"""Seconds between attempts while the link is down or the stream refuses."""


class MailLink:
    """The fleet part ``mail``: this daemon's mail over the fleet's link (and the
    ``Transport`` of :class:`FleetMail`)."""

    name = "mail"

    def __init__(self, link: FleetLink, registry: FleetRegistry, desk: MailDesk) -> None:
        self.link = link
        self.registry = registry
        self.host = link.cfg.name
        self.desk = desk
        self._kick = anyio.Event()
        self._tg: TaskGroup | None = None
        self._subs: list[Any] = []  # the nats subscriptions serving asks and collects
        self.published = self.taken = self.dropped = 0
        self._known: dict[str, str] = {}

    def status(self) -> dict[str, Any]:
        """For ``fleet status``: the outbox waiting, items published, taken, dropped."""
        waiting = len(self.desk.post.pending)
        return {
            "outbox": waiting, "published": self.published, "taken": self.taken,
            "duplicates_dropped": self.dropped,
            "local_only": [f"mail for other hosts not sent yet: {waiting} items"]
            if waiting and not self.link.connected else [],
        }  # fmt: skip

    def host_of(self, sid: str) -> str | None:
        """The host the fleet registry places ``sid`` on (None: not known there).

        While the link is down the registry forgets the other hosts after a few
        heartbeats; a send to a session that was on another host when the link went
        still goes to that host's outbox then (the last picture, :meth:`_remember`)."""
        host = self.registry.host_of(sid)
        if host is None and not self.link.connected:
            return self._known.get(sid)
        return host

    def _remember(self) -> None:
        """Where every remote session lives, as the registry says now (link up only)."""
        if self.link.connected:
            self._known = {i.session_id: i.host for i in self.registry.remote_sessions()}

    # --- Transport --------------------------------------------------------------------

    def mail_subject(self, host: str | None) -> str:
        return self.link.subject("mail", wire.ALL if host is None else host)

    def kick(self) -> None:
        """There are new outbox rows: wake the forwarder."""
        self._kick.set()

    async def request(self, host: str, payload: bytes, timeout: float) -> bytes:
        nc = self.link.nc
        if nc is None or not self.link.connected:
            raise StorageUnavailable(
                f"the fleet is not reachable now, so {host} cannot be asked "
                f"({self.link.last_error or 'link down'})",
                {"host": host, "reason": "fleet"},
            )
        try:
            msg = await nc.request(self.link.subject("ask", host), payload, timeout=timeout)
        except nats.errors.NoRespondersError:
            raise StorageUnavailable(
                f"host {host} does not answer on the fleet (its meshd is not connected)",
                {"host": host, "reason": "no responders"},
            ) from None
        except (nats.errors.Error, TimeoutError) as exc:
            raise StorageUnavailable(
                f"asking host {host} failed: {describe(exc)}", {"host": host, "reason": "fleet"}
            ) from exc
        return bytes(msg.data)

    async def gather(self, payload: bytes, timeout: float) -> list[bytes]:
        """Publish a collected broadcast to every host; the replies that come within
        ``timeout``, or as soon as every other host the registry knows replied."""
        nc = self.link.nc
        if nc is None or not self.link.connected:
            raise StorageUnavailable(
                f"the fleet is not reachable now ({self.link.last_error or 'link down'})",
                {"reason": "fleet"},
            )
        expect = self.other_hosts()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        got: list[bytes] = []
        heard: set[str] = set()
        try:
            await nc.publish(self.link.subject("collect"), payload, reply=inbox)
            with anyio.move_on_after(timeout):
                while not expect <= heard:
                    msg = await sub.next_msg(timeout=timeout)
                    got.append(bytes(msg.data))
                    with contextlib.suppress(wire.DecodeError):
                        heard.add(wire.decode_collected(msg.data).host)
        except (nats.errors.Error, TimeoutError) as exc:
            log.info("fleet: collecting: %s", describe(exc))
        finally:
            await _quietly(sub.unsubscribe)
        return got

    def other_sessions(self) -> list[m.SessionInfo]:
        """The live sessions of every other host, as the registry knows them now."""
        return self.registry.remote_sessions()

    def other_hosts(self) -> set[str]:
        """The other hosts with live sessions, as the registry knows them now."""
        return {i.host for i in self.registry.remote_sessions() if i.host}

    # --- running ------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve asks, forward the outbox and consume this host's mail until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._forward)
            tg.start_soon(self._consume)
            tg.start_soon(self._serve_asks)
            tg.start_soon(self._watch_registry)

    async def _watch_registry(self) -> None:
        while True:
            self._remember()
            await anyio.sleep(RETRY)

    async def _serve_asks(self) -> None:
        """Subscribe to this host's asks and to every host's collected broadcasts."""
        while True:
            await self.link.wait_connected()
            nc = self.link.nc
            if nc is not None and not self._subs:
                try:
                    self._subs = [
                        await nc.subscribe(self.link.subject("ask", self.host), cb=self._on_ask),
                        await nc.subscribe(self.link.subject("collect"), cb=self._on_collect),
                    ]
                except nats.errors.Error as exc:
                    log.warning("fleet: cannot serve asks yet: %s", describe(exc))
                    self._subs = []
            # nats-py subscribes again by itself after a reconnection; a new client
            # (the link started over) needs new subscriptions.
            while self.link.connected and self.link.nc is nc:
                await anyio.sleep(RETRY)
            if self.link.nc is not nc:
                self._subs = []

    async def _on_ask(self, msg: Msg) -> None:
        if self.desk.answers_at_once(msg.data):  # the status responder: no waiting
            await self._respond(msg, self.desk.serve_ask)
            return
        assert self._tg is not None
        self._tg.start_soon(self._respond, msg, self.desk.serve_ask)

    async def _on_collect(self, msg: Msg) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._respond, msg, self.desk.serve_collect)

    async def _respond(self, msg: Msg, serve: Callable[[bytes], Awaitable[bytes | None]]) -> None:
        """Serve one request in a task of its own (a live responder may take its whole
        timeout) and send the reply back, if there is one."""
        reply = await serve(msg.data)
        if reply is None or not msg.reply:
            return
        try:
            await msg.respond(reply)
        except nats.errors.Error as exc:
            log.info("fleet: a reply could not be sent back: %s", describe(exc))

    async def _forward(self) -> None:
        post = self.desk.post
        while True:
            with anyio.move_on_after(RETRY):
                await self._kick.wait()
            self._kick = anyio.Event()
            if not post.pending or not self.link.connected:
                continue
            sent = await self._publish_pending()
            if sent:
                self.desk.sent()  # the rows go ("fleet.sent")

    async def _publish_pending(self) -> int:
        """Publish the outbox in order; stop at the first row JetStream did not take."""
        js = self.link.js
        if js is None:
            return 0
        post, sent = self.desk.post, 0
        await self._ensure_stream(js)
        for out in list(post.pending.values()):
            try:
                await js.publish(
                    out.subject, out.payload, timeout=PUBLISH_TIMEOUT,
                    headers={"Nats-Msg-Id": out.key},
                )  # fmt: skip
            except (nats.errors.Error, TimeoutError) as exc:
                log.info("fleet: outbox row %s not taken yet: %s", out.key, describe(exc))
                break
            post.sent(out.key)
            sent += 1
            self.published += 1
        return sent

    async def _ensure_stream(self, js: Any) -> None:
        name = self.link.stream("MAIL")
        try:
            await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            cfg = StreamConfig(
                name=name, subjects=[self.link.subject("mail") + ".>"],
                storage=StorageType.FILE, max_age=wire.STREAM_MAX_AGE,
                duplicate_window=wire.DUPLICATE_WINDOW,
            )  # fmt: skip
            with contextlib.suppress(nats.js.errors.BadRequestError):  # made meanwhile
                await js.add_stream(cfg)

    async def _consume(self) -> None:
        while True:
            await self.link.wait_connected()
            try:
                await self._pull()
            except (nats.errors.Error, TimeoutError) as exc:
                log.info("fleet: mail consumer: %s; again in %s s", describe(exc), RETRY)
            await anyio.sleep(RETRY)

    async def _pull(self) -> None:
        js = self.link.js
        if js is None:
            return
        await self._ensure_stream(js)
        stream, durable = self.link.stream("MAIL"), f"host_{self.link.host_token}"
        try:
            await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            await js.add_consumer(
                stream,
                ConsumerConfig(
                    durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT,
                    deliver_policy=DeliverPolicy.ALL, max_ack_pending=1000,
                    filter_subjects=[self.mail_subject(self.host), self.mail_subject(None)],
                ),
            )  # fmt: skip
        sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
        try:
            while self.link.connected and self.link.js is js:
                try:
                    msgs = await sub.fetch(FETCH_BATCH, timeout=FETCH_WAIT)
                except nats.errors.TimeoutError:
                    continue
                for msg in msgs:
                    await self._take(msg)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await _quietly(sub.unsubscribe)

    async def _take(self, msg: Msg) -> None:
        try:
            item = wire.decode_mail(msg.data)
        except wire.DecodeError as exc:
            item = None
            log.warning("fleet: dropped an unreadable mail item: %s", exc)
        if item is None or not item.key:
            await msg.term()  # never deliver it again
            return
        key = item.key
        if item.to is None and item.from_host == self.host:
            await msg.ack()  # our own broadcast or signal
            return
        try:
            new = await self.desk.take(key, item)
        except StorageUnavailable as exc:
            log.warning("fleet: could not store mail item %s (%s); it comes again", key, exc)
            await msg.nak(delay=RETRY)
            return
        except Exception:  # never lost, never a tight loop: again in a minute
            log.exception("fleet: taking mail item %s failed; it comes again", key)
            await msg.nak(delay=POISON_RETRY)
            return
        await msg.ack()
        if new:
            self.taken += 1
        else:
            self.dropped += 1


async def _quietly(fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    except Exception as exc:
        log.debug("fleet: %s", describe(exc))
