"""The domains: one module per domain (its methods), each a :class:`meshd.domain.Domain`.

The service never imports this package; ``meshd.app.DOMAINS`` lists the domain
classes and the service makes one of each (see CONTRIBUTING.md).
"""
