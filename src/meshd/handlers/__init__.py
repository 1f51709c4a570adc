"""Method handlers, one module per domain; each exports ``install(svc)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meshd.service import Service


def install_all(svc: Service) -> None:
    """Add every domain's methods to ``svc`` (the order is the schema's order)."""
    from meshd.handlers import board, claims, mesh, messages, notes, sessions

    mesh.install(svc)
    sessions.install(svc)
    claims.install(svc)
    messages.install(svc)
    board.install(svc)
    notes.install(svc)
