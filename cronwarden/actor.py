"""Who is changing a schedule, and why: what `store.change_log` records for every apply, pause,
unpause, trigger, delete and backfill.

The actor is the `--actor` flag, else `CRONWARDEN_ACTOR` (a CI job names itself there once),
else the OS user and host (`alice@laptop`). Whoever runs the command may claim any name: the
record says who the command was run as, it is no authentication.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping

from cronwarden.errors import InvalidInput

ACTOR_ENV = "CRONWARDEN_ACTOR"
# The change_log table's bounds (migration 0024): refused here, with the flag's name, before
# anything changes, rather than by Postgres after Temporal did.
MAX_ACTOR = 200
MAX_REASON = 2000


def resolve_actor(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The actor of a change: the flag, else CRONWARDEN_ACTOR, else `user@host`. A flag or
    variable that is set but empty, too long or not printable is refused (InvalidInput)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return _checked(flag, "--actor")
    named = env.get(ACTOR_ENV)
    if named is not None:
        return _checked(named, ACTOR_ENV)
    return _checked(default_actor(), "the OS user and host")


def default_actor() -> str:
    """`user@host` of this process. A container often runs as a uid with no passwd entry:
    its number stands in for the name."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname() or 'unknown-host'}"[:MAX_ACTOR]


def check_reason(reason: str | None) -> str | None:
    """The reason as recorded: None when not given or empty; refused when too long or holding
    control characters (it is shown in tables, pages and Temporal's note on one line)."""
    if reason is None or not reason.strip():
        return None
    text = reason.strip()
    if len(text) > MAX_REASON:
        raise InvalidInput(f"--reason is {len(text)} characters long; at most {MAX_REASON}")
    if not text.isprintable():
        raise InvalidInput("--reason holds a control character (a newline, a tab): write one line")
    return text


def _checked(value: str, source: str) -> str:
    text = value.strip()
    if not text:
        raise InvalidInput(f"{source} is empty: name who makes the change (e.g. alice, ci-deploy)")
    if len(text) > MAX_ACTOR:
        raise InvalidInput(f"{source} is {len(text)} characters long; at most {MAX_ACTOR}")
    if not text.isprintable():
        raise InvalidInput(f"{source} holds a control character (a newline, a tab): write one line")
    return text
