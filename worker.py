"""`python worker.py` is `cronwarden worker`: one glance shows what a worker runs."""

from __future__ import annotations

from cronwarden.cli.app import main

if __name__ == "__main__":
    main(["worker"])
