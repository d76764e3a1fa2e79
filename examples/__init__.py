"""Demo jobs used by `cronwarden dev` (CRONWARDEN_JOBS=examples.ledger)."""

from __future__ import annotations
