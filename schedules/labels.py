"""Schedule labels (`labels: {team: billing}`): the rule every key and value follows.

The rule is Kubernetes' for label names and values, kept strict so a label can go anywhere a
page or a metric takes one without escaping: a Kubernetes label, an Alertmanager or PagerDuty
routing field, a Prometheus label value. Keys are lowercase (Kubernetes' name part without its
`prefix/`): two keys that differ only in case would be one key to most of those receivers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MAX_LABELS = 16
"""Labels a schedule may carry: enough to route and group by, few enough that every page and
`list` row carries all of them."""
MAX_LENGTH = 63
"""Longest key or value, as in Kubernetes."""

_KEY = re.compile(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?")
_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")

LABEL_RULE = (
    "a key is 1-63 lowercase letters, digits, '-', '_' and '.', starting and ending with a "
    "letter or digit; a value is empty or 1-63 letters, digits, '-', '_' and '.', starting and "
    "ending with a letter or digit"
)


def key_problem(key: str) -> str | None:
    """Why `key` cannot be a label key, or None."""
    if len(key) > MAX_LENGTH:
        return f"the label key '{key[:20]}…' is {len(key)} characters; the limit is {MAX_LENGTH}"
    if not _KEY.fullmatch(key):
        return f"'{key}' is not a valid label key: {LABEL_RULE}"
    return None


def value_problem(key: str, value: str) -> str | None:
    """Why `value` cannot be the value of label `key`, or None."""
    if len(value) > MAX_LENGTH:
        return f"the value of label '{key}' is {len(value)} characters; the limit is {MAX_LENGTH}"
    if not _VALUE.fullmatch(value):
        return f"'{value}' is not a valid value for label '{key}': {LABEL_RULE}"
    return None


def check_labels(value: object) -> dict[str, str]:
    """The labels of a schedule file entry; ValueError (one sentence) for anything else.

    A YAML number or boolean is refused, not turned into text: `env: 01` reads as 1 and
    `enabled: yes` as true, so the label would silently differ from what the file shows.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("`labels` must be a mapping of keys to values, such as {team: billing}")
    if len(value) > MAX_LABELS:
        raise ValueError(f"{len(value)} labels; a schedule carries at most {MAX_LABELS}")
    checked: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(
                f"the label key {key!r} is a {_yaml_kind(key)} to YAML; keys are strings: "
                f"quote it as you wrote it ('{_as_written(key)}')"
            )
        problem = key_problem(key)
        if problem is not None:
            raise ValueError(problem)
        if not isinstance(item, str):
            if item is None:
                raise ValueError(f"label '{key}' has no value: write '' for an empty one")
            raise ValueError(
                f"the value of label '{key}' is a {_yaml_kind(item)} to YAML "
                f"({_as_written(item)}); label values are strings: quote it as you wrote it "
                f"({key}: '{_as_written(item)}')"
            )
        problem = value_problem(key, item)
        if problem is not None:
            raise ValueError(problem)
        checked[key] = item
    return checked


def metric_label_name(key: str) -> str:
    """The Prometheus label a schedule label key becomes: `label_` and the key with `-` and `.`
    as `_` (as kube-state-metrics names Kubernetes labels), so it never clashes with
    `schedule_id` or `outcome` and is a valid label name whatever the key's first character."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def labels_of(definition: Mapping[str, Any] | None) -> dict[str, str]:
    """The labels a recorded definition (its JSON form) carries; {} for none or an unreadable
    entry (a definition written before labels existed has no `labels` key)."""
    raw = (definition or {}).get("labels")
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str)}


def _yaml_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _as_written(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
