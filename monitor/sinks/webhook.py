"""Generic webhook: the message as a JSON body, signed with HMAC-SHA256 when a secret is set.

Receivers verify `X-Cronwarden-Signature: sha256=<hex>` over the raw body, and may drop
repeats by `X-Cronwarden-Delivery` (delivery is at least once: a monitor killed after the
receiver answered but before it recorded the answer sends again).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cronwarden.monitor.sinks import json_body

SIGNATURE_HEADER = "X-Cronwarden-Signature"
DELIVERY_HEADER = "X-Cronwarden-Delivery"
DEFAULT_MAX_BODY = 256 * 1024


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class WebhookSink:
    target: SecretStr
    secret: SecretStr | None = None
    name: str = "webhook"
    max_body: int = DEFAULT_MAX_BODY
    """`CRONWARDEN_ALERT_WEBHOOK_MAX_BYTES`: the receiver's body size limit."""

    def url(self) -> str:
        return self.target.get_secret_value()

    def render(self, message: Mapping[str, Any]) -> bytes:
        return json_body(message)

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]:
        headers = {DELIVERY_HEADER: delivery_id}
        if self.secret is not None and self.secret.get_secret_value():
            headers[SIGNATURE_HEADER] = signature(self.secret.get_secret_value(), body)
        return headers
