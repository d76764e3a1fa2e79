"""cronwarden: scheduled jobs on Temporal Schedules, guarded by lease, outbox and heartbeat."""

from __future__ import annotations

__version__ = "0.1.0"
