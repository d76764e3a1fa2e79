from __future__ import annotations

from cronwarden.cli.app import main

main()
