"""Mail (SPEC §6): inboxes, handoffs, queries and broadcasts, and the fleet's post office."""
