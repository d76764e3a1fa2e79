"""A job module that fails at import, as a typo in a deployment would."""

from __future__ import annotations

raise RuntimeError("this module is broken on purpose")
