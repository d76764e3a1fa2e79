"""Where the checkout is: the working directory of every subprocess the tests start, and the
root its files are found from."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
