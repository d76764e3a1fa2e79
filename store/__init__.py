"""Postgres: the pool, the migrations and the queries. Imports nothing else of cronwarden's
packages but `cronwarden.errors` and `cronwarden.config`, so every other layer can depend on it."""

from __future__ import annotations
