"""Demo jobs used by `cronwarden dev` (CRONWARDEN_JOBS=cronwarden.examples.ledger)."""

from __future__ import annotations
