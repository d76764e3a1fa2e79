"""Label selectors: which schedules a command acts on, by their labels (`--label team=billing`).

Two forms only, each a subset of Kubernetes' selector syntax so a reader of one reads the other:

- `key=value`: the schedule has label `key` with exactly that value (`key==value` too);
- `key`: the schedule has label `key`, whatever its value.

Several terms (repeated `--label` flags, or commas inside one) must all hold. Anything else
(`!=`, `in (…)`, `!key`) is refused with what to write instead, never read as a looser match:
a selector that matched more than meant would pause or list the wrong schedules. A key or value
no label can have (see `schedules.labels`) is refused too, as the typo it most likely is.

`parse_selector` and `matching_ids` are what a command taking `--label` uses: parse before
connecting to anything, so bad input changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cronwarden.errors import InvalidInput
from cronwarden.schedules.labels import key_problem, labels_of, value_problem

SYNTAX = "use key=value (the label has that value) or key (the schedule has the label)"


@dataclass(frozen=True)
class Term:
    key: str
    value: str | None
    """None: the label only has to be there."""

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"

    def holds(self, labels: Mapping[str, str]) -> bool:
        if self.key not in labels:
            return False
        return self.value is None or labels[self.key] == self.value


@dataclass(frozen=True)
class LabelSelector:
    """Every term must hold. No terms at all selects nothing: a command that acts on "every
    schedule" says so with its own flag, never with an empty selector."""

    terms: tuple[Term, ...]

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return bool(self.terms) and all(t.holds(labels) for t in self.terms)

    def matches_definition(self, definition: Mapping[str, Any] | None) -> bool:
        """Whether a recorded definition (JSON form, as in the schedule's memo or the
        definition history) carries labels this selector matches; a schedule with no recorded
        definition (not created by cronwarden) never matches."""
        return definition is not None and self.matches(labels_of(definition))


def parse_selector(texts: Sequence[str]) -> LabelSelector:
    """The selector of one or more `--label` texts; InvalidInput naming the first bad term."""
    terms: list[Term] = []
    for text in texts:
        for part in text.split(","):
            terms.append(_term(part.strip(), whole=text))
    if not terms:
        raise InvalidInput(f"the label selector is empty: {SYNTAX}")
    return LabelSelector(tuple(dict.fromkeys(terms)))


def matching_ids(
    definitions: Mapping[str, Mapping[str, Any] | None], selector: LabelSelector
) -> list[str]:
    """The ids (sorted) whose definition the selector matches, of `definitions` (id -> the
    recorded definition, e.g. `store.definitions.latest_all`)."""
    return sorted(i for i, d in definitions.items() if selector.matches_definition(d))


def selected(items: Iterable[Any], selector: LabelSelector | None) -> list[Any]:
    """Of objects with a `definition` attribute (the schedule views `list` shows), those the
    selector matches; all of them when there is no selector."""
    if selector is None:
        return list(items)
    return [i for i in items if selector.matches_definition(getattr(i, "definition", None))]


def _term(part: str, *, whole: str) -> Term:
    where = f"label selector '{whole}'"
    if not part:
        raise InvalidInput(f"{where} has an empty term: {SYNTAX}")
    for unsupported in ("!=", "!", " in ", " notin ", "(", ")", "<", ">"):
        if unsupported in part:
            raise InvalidInput(
                f"{where}: '{part}' is not supported (only equality and presence are): {SYNTAX}"
            )
    key, sep, value = part.partition("=")
    if sep and value.startswith("="):
        value = value[1:]  # key==value, as Kubernetes also reads it
    key = key.strip()
    if not key:
        raise InvalidInput(f"{where}: '{part}' names no label key: {SYNTAX}")
    problem = key_problem(key)
    if problem is not None:
        raise InvalidInput(f"{where}: {problem}")
    if not sep:
        return Term(key, None)
    value = value.strip()
    problem = value_problem(key, value)
    if problem is not None:
        raise InvalidInput(f"{where}: {problem}")
    return Term(key, value)
