"""The socket server: accept, admit, frame, run and answer (SPEC §3).

:mod:`~meshd.server.admission` runs the accept loop and checks each peer,
:mod:`~meshd.server.connection` owns one connection's stream and write path,
:mod:`~meshd.server.frames` cuts bytes into frames, :mod:`~meshd.server.serve`
runs each connection's frame loop and its requests, :mod:`~meshd.server.turns` and
:mod:`~meshd.server.replies` order bursts and late replies,
:mod:`~meshd.server.socketfile` binds the socket path and
:mod:`~meshd.server.eventloop` picks the event loop. The client never loads any of it.
"""
