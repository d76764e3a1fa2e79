"""Pure decisions of notification delivery: how long a claim lasts."""

from __future__ import annotations

import pytest

from cronwarden.monitor.notify import DeliveryPolicy


@pytest.mark.parametrize(
    ("send_timeout", "database_timeout"), [(10.0, 30.0), (1.0, 2.0), (30.0, 5.0), (0.5, 60.0)]
)
def test_a_claim_outlasts_the_rest_of_the_claim_step_the_send_and_the_marking(
    send_timeout: float, database_timeout: float
) -> None:
    # After the claim's statement the holder may still spend up to one database step finishing
    # the claim, the send's total deadline, and one database step marking the row: a claim any
    # shorter can lapse first, and another replica sends the same page again.
    policy = DeliveryPolicy(send_timeout=send_timeout, database_timeout=database_timeout)
    assert policy.claim_seconds > send_timeout + 2 * database_timeout
