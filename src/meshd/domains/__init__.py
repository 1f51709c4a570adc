"""The domains: one module per domain (its methods), each a :class:`meshd.domain.Domain`.

The service never imports this package; ``meshd.app.wire`` makes one of each,
handing each the collaborators it uses (see CONTRIBUTING.md).
"""
