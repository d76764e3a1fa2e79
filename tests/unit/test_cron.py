from __future__ import annotations

import pytest

from cronwarden.schedules.cron import CronLint, cron_fields, validate_cron


def refusal(expr: str) -> str:
    with pytest.raises(ValueError) as exc_info:
        validate_cron(expr)
    return str(exc_info.value)


@pytest.mark.parametrize(
    "expr",
    [
        "0 2 * * *",
        "*/15 * * * *",
        "0 */6 * * *",
        "5/15 * * * *",
        "0 9 * * mon-fri",
        "0 9 * * 1-5",
        "0 0 1 jan,jul *",
        "0 0 1 January *",
        "0 0 * * 7",
        "0 0 * * su,sa",
        "0 0 */2 * *",
        "0 0 1 */3 *",
        "0 0 * * * 2030",
        "0 0 1 1 * 2030-2040/2",
        "0 8-18/2 * * *",
        "5-20/5 * * * *",
        "0 0 * * 1/7",
        "0 0 1-7,15 * *",
    ],
)
def test_it_accepts_what_temporal_accepts(expr: str) -> None:
    assert validate_cron(expr) == expr


def test_it_joins_the_fields_with_single_spaces() -> None:
    assert validate_cron("  0   2\t* * *  ") == "0 2 * * *"


@pytest.mark.parametrize(
    "macro", ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]
)
def test_it_returns_macros_unchanged(macro: str) -> None:
    assert validate_cron(macro) == macro


def test_it_refuses_an_unknown_macro() -> None:
    assert "'@Daily' is not a cron macro Temporal knows; use one of @annually" in refusal("@Daily")


def test_it_points_every_intervals_to_the_every_field() -> None:
    assert refusal("@every 5m") == "'@every 5m': use `every:` instead of '@every' (e.g. every: 15m)"


@pytest.mark.parametrize("expr", ["TZ=Europe/Paris 0 2 * * *", "CRON_TZ=UTC 0 2 * * *"])
def test_it_refuses_a_time_zone_prefix_and_points_to_the_timezone_field(expr: str) -> None:
    message = refusal(expr)
    assert "TZ= and CRON_TZ= prefixes are refused" in message
    assert "`timezone:`" in message


def test_it_refuses_a_comment() -> None:
    assert "comments (#) are not allowed" in refusal("0 2 * * * # nightly")


@pytest.mark.parametrize("expr", ["0 2 * *", "0 0 0 2 * * * *", "*"])
def test_it_refuses_a_field_count_other_than_five_to_seven(expr: str) -> None:
    count = len(expr.split())
    assert refusal(expr) == (
        f"'{expr}' has {count} fields; use 5 (minute hour day-of-month month day-of-week), "
        "6 (minute hour day-of-month month day-of-week year) "
        "or 7 (second minute hour day-of-month month day-of-week year)"
    )


def test_it_refuses_an_empty_expression() -> None:
    assert refusal("   ") == "the cron expression is empty"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", "minute field '61': 61 is outside 0-59"),
        ("0 24 * * *", "hour field '24': 24 is outside 0-23"),
        ("0 0 0 * *", "day-of-month field '0': 0 is outside 1-31"),
        ("0 0 32 * *", "day-of-month field '32': 32 is outside 1-31"),
        ("0 0 * 13 *", "month field '13': 13 is outside 1-12"),
        ("0 0 * * 8", "day-of-week field '8': 8 is outside 0-7"),
        ("0 0 * * 1,9", "day-of-week field '1,9': 9 is outside 0-7"),
    ],
)
def test_it_names_the_field_of_a_value_out_of_range(expr: str, message: str) -> None:
    assert refusal(expr) == message


def test_it_reminds_that_the_sixth_field_is_the_year() -> None:
    assert refusal("*/10 * * * * 5") == (
        "year field '5': 5 is outside 2000-2100 "
        "(the 6th field is the year, not seconds: seconds need all 7 fields)"
    )


@pytest.mark.parametrize(
    "expr", ["*/10 * * * * * *", "30 0 9 * * mon-fri *", "0 0 0 1 1 * 2030", "+5 0 * * * * *"]
)
def test_it_accepts_the_seven_field_form_with_seconds(expr: str) -> None:
    assert validate_cron(expr) == expr


def test_it_reads_the_first_of_seven_fields_as_seconds() -> None:
    fields = cron_fields("15,45 0 9 * * 7 2030")
    assert fields.seconds == {15, 45}
    assert (fields.minutes, fields.hours, fields.days_of_week) == (
        frozenset({0}),
        frozenset({9}),
        frozenset({0}),
    )
    assert fields.years == frozenset({2030})


def test_it_checks_the_seconds_field_like_the_minutes() -> None:
    assert refusal("*/7 * * * * * *").startswith("second field '*/7' does not tile 60 seconds")
    assert refusal("60 * * * * * *") == "second field '60': 60 is outside 0-59"


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("TZ=UTC 0 2 * * *", "tz-prefix"),
        ("0 2 * * * # nightly", "no-comment"),
        ("0 9 * * mon#2", "nth-weekday"),
        ("@every 5m", "use-every"),
        ("0 */5 * * *", "uneven-step"),
    ],
)
def test_it_names_the_rule_of_a_refusal_temporal_would_accept(expr: str, rule: str) -> None:
    with pytest.raises(CronLint) as exc_info:
        validate_cron(expr)
    assert exc_info.value.rule == rule


def test_it_needs_three_letters_of_a_month_name() -> None:
    assert refusal("0 0 1 ju *") == (
        "month field 'ju': 'ju' is not a month number (1-12) or name (jan, feb, mar, ...)"
    )


def test_it_needs_two_letters_of_a_day_name() -> None:
    assert "day-of-week field 's': 's' is not a day-of-week number (0-7)" in refusal("0 0 * * s")


def test_it_refuses_a_range_that_ends_before_it_starts() -> None:
    assert refusal("0 20-5 * * *") == "hour field '20-5': range '20-5' ends before it starts"


def test_it_refuses_a_zero_step() -> None:
    assert refusal("*/0 * * * *") == "minute field '*/0': step 0 in '*/0' must be at least 1"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("1,,2 * * * *", "minute field '1,,2': an item between commas is empty"),
        ("1-2-3 * * * *", "'1-2-3' is not a range"),
        ("*/x * * * *", "step 'x' in '*/x' is not a whole number"),
        ("abc * * * *", "minute field 'abc': 'abc' is not a number in 0-59"),
    ],
)
def test_it_refuses_malformed_items(expr: str, message: str) -> None:
    assert message in refusal(expr)


@pytest.mark.parametrize(
    ("expr", "feature"),
    [
        ("0 0 ? * mon", "'?' is not supported"),
        ("0 0 L * *", "'L' (last day) is not supported"),
        ("0 0 * * 5L", "'L' (last day) is not supported"),
        ("0 0 15W * *", "'W' (nearest weekday) is not supported"),
        ("0 9 * * 1#2", "'#' (nth weekday of the month) is not supported"),
    ],
)
def test_it_refuses_quartz_extensions_temporal_does_not_support(expr: str, feature: str) -> None:
    assert feature in refusal(expr)


def test_it_refuses_a_step_that_does_not_tile_the_hours() -> None:
    assert refusal("0 */5 * * *") == (
        "hour field '*/5' does not tile 24 hours: it fires at 0,5,10,15,20 and then waits "
        "4 hours at the wrap-around; use a step that divides 24 (1, 2, 3, 4, 6, 8, 12) "
        "or list the hours"
    )


def test_it_refuses_a_step_that_does_not_tile_the_minutes() -> None:
    assert refusal("*/7 * * * *") == (
        "minute field '*/7' does not tile 60 minutes: it fires at 0,7,14,21,28,35,42,49,56 and "
        "then waits 4 minutes at the wrap-around; use a step that divides 60 "
        "(1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30) or list the minutes"
    )


def test_it_refuses_a_step_that_does_not_tile_the_months() -> None:
    message = refusal("0 0 1 */5 *")
    assert message.startswith(
        "month field '*/5' does not tile 12 months: it fires at 1,6,11 and then waits 2 months"
    )


def test_it_refuses_a_step_that_does_not_tile_the_week() -> None:
    message = refusal("0 0 * * */2")
    assert message.startswith(
        "day-of-week field '*/2' does not tile 7 days: it fires at 0,2,4,6 and then waits 1 day "
    )


def test_it_counts_seven_as_sunday_when_checking_day_of_week_steps() -> None:
    # 1/6 runs to 7, which is Sunday again: Monday and Sunday, one day apart.
    assert "it fires at 0,1 (7 is Sunday, like 0), so the gaps between runs are uneven" in (
        refusal("0 0 * * 1/6")
    )


def test_it_checks_a_step_starting_past_zero_from_its_start() -> None:
    # 30/30 is only minute 30: hourly, not every 30 minutes.
    assert refusal("30/30 * * * *") == (
        "minute field '30/30' does not tile 60 minutes: it fires at 30 and then waits "
        "60 minutes at the wrap-around; start below the step (e.g. '0/30') or list the minutes"
    )


def test_it_names_the_item_that_does_not_tile_within_a_list() -> None:
    assert refusal("0 */5,3 * * *").startswith("hour field '*/5,3': '*/5' does not tile 24 hours")


def test_it_treats_a_range_over_the_whole_field_like_a_star() -> None:
    assert refusal("0 0-23/5 * * *").startswith("hour field '0-23/5' does not tile 24 hours")


def test_it_leaves_a_bounded_window_alone_even_if_its_step_does_not_divide_the_cycle() -> None:
    assert validate_cron("0 1-22/7 * * *") == "0 1-22/7 * * *"


def test_it_does_not_check_day_of_month_steps_because_months_differ_in_length() -> None:
    assert validate_cron("0 0 */5 * *") == "0 0 */5 * *"


def test_it_does_not_check_year_steps() -> None:
    assert validate_cron("0 0 1 1 * */3") == "0 0 1 1 * */3"
