from __future__ import annotations

from cronwarden.cli import main

main()
