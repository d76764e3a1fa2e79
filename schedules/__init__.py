"""Schedule definitions: the YAML file format, its durations and cron specs, and their checks.

Pure logic only; turning a definition into a Temporal Schedule lives elsewhere.
"""

from __future__ import annotations
