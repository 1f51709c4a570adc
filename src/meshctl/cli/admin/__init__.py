"""What the administration commands do, kept apart from the client library.

``doctor``, ``service`` (systemd/launchd units), ``hermes`` (the plugin's install,
its ``config.yaml`` edits and its checks), ``import`` (coordination state from
another tool) and ``fleet`` (the ``[fleet]`` config table): each click command in
:mod:`meshctl.cli` parses its arguments and calls the module here that does the work.
None of these is part of ``import meshctl``, and none travels with the Hermes plugin.
"""
