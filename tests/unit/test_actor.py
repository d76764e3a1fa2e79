"""Who a change is recorded as: the flag, else CRONWARDEN_ACTOR, else user@host, each checked the
same way; and `cronwarden audit` reading an unknown first word as `audit fires`."""

from __future__ import annotations

import pytest

from cronwarden.actor import MAX_ACTOR, check_reason, default_actor, resolve_actor
from cronwarden.cli.app import command
from cronwarden.errors import InvalidInput


def test_the_flag_wins_over_the_variable_which_wins_over_user_at_host() -> None:
    env = {"CRONWARDEN_ACTOR": "ci-deploy"}
    assert resolve_actor("alice", env) == "alice"
    assert resolve_actor(None, env) == "ci-deploy"
    assert resolve_actor(None, {}) == default_actor()
    user, _, host = default_actor().partition("@")
    assert user and host


@pytest.mark.parametrize(
    ("flag", "env", "named"),
    [
        ("", {}, "--actor is empty"),
        ("   ", {}, "--actor is empty"),
        ("x" * (MAX_ACTOR + 1), {}, "--actor is 201 characters long"),
        ("a\nb", {}, "--actor holds a control character"),
        (None, {"CRONWARDEN_ACTOR": ""}, "CRONWARDEN_ACTOR is empty"),
        (None, {"CRONWARDEN_ACTOR": "a\x1b[31m"}, "CRONWARDEN_ACTOR holds a control"),
    ],
)
def test_a_bad_actor_is_refused_naming_where_it_came_from(
    flag: str | None, env: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidInput, match=named.replace("[", r"\[")):
        resolve_actor(flag, env)


def test_an_actor_at_the_bound_and_unicode_are_accepted() -> None:
    assert resolve_actor("x" * MAX_ACTOR, {}) == "x" * MAX_ACTOR
    assert resolve_actor(" zoë@équipe ", {}) == "zoë@équipe"


def test_a_reason_is_one_line_of_at_most_2000_characters_and_empty_is_none() -> None:
    assert check_reason(None) is None
    assert check_reason("  ") is None
    assert check_reason(" disk swap ") == "disk swap"
    assert check_reason("r" * 2000) == "r" * 2000
    for bad in ("r" * 2001, "two\nlines", "a\tb"):
        with pytest.raises(InvalidInput, match="--reason"):
            check_reason(bad)


@pytest.mark.parametrize(
    ("argv", "invoked"),
    [
        (["audit", "log"], "audit log"),
        (["audit", "fires", "log"], "audit fires"),
        (["audit", "nightly-report"], "audit fires"),
        (["audit", "--since", "2d", "nightly-report"], "audit fires"),
    ],
)
def test_audit_reads_an_unknown_first_word_as_a_schedule_of_audit_fires(
    argv: list[str], invoked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command()(args=[*argv, "--help"], standalone_mode=False) == 0
    usage = next(line for line in capsys.readouterr().out.splitlines() if "Usage" in line)
    assert f" {invoked} " in usage, usage
