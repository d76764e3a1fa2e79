"""Workflows: ScheduledRunWorkflow, started by Temporal Schedules and by backfill replays."""

from __future__ import annotations
