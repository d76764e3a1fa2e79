"""The absence monitor: reads Postgres only (never Temporal), so it keeps paging while Temporal
and every worker are down."""

from __future__ import annotations
