"""The optional payload codec (`CRONWARDEN_PAYLOAD_CODEC=module:attribute`).

A codec encodes every payload the client and the worker send to Temporal (workflow inputs,
results, memos, activity arguments), so the server and its database only ever hold what the
codec made of them: the usual hook for encryption. Off by default.
"""

from __future__ import annotations

import dataclasses
import importlib

from temporalio.api.failure.v1 import Failure
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    PayloadCodec,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from cronwarden.config import Settings
from cronwarden.errors import InvalidInput
from cronwarden.redact import printable, redact


def load_payload_codec(spec: str) -> PayloadCodec:
    """The codec named by `module:attribute`: a `PayloadCodec` instance, or a class or
    zero-argument factory that returns one."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise InvalidInput(f"CRONWARDEN_PAYLOAD_CODEC: cannot import {module_name}: {exc}") from exc
    target = getattr(module, attr.strip(), None)
    if target is None:
        raise InvalidInput(f"CRONWARDEN_PAYLOAD_CODEC: {module_name} has no attribute {attr}")
    codec = target if isinstance(target, PayloadCodec) else None
    if codec is None and callable(target):
        try:
            made = target()
        except Exception as exc:  # the codec's own setup failed, e.g. its key is not configured
            raise InvalidInput(
                f"CRONWARDEN_PAYLOAD_CODEC: {spec.strip()} failed to make a codec: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        codec = made if isinstance(made, PayloadCodec) else None
    if codec is None:
        raise InvalidInput(
            f"CRONWARDEN_PAYLOAD_CODEC: {spec} is neither a temporalio PayloadCodec nor a "
            "factory that returns one"
        )
    return codec


class RedactingFailureConverter(DefaultFailureConverter):
    """Failures as the default converter makes them, their messages and stack traces scrubbed
    (cronwarden/redact.py): a job's exception, its cause chain and its traceback go into the
    run's history in Temporal, kept as long as the namespace's retention and shown to anyone
    with the UI; the heartbeat's `last_error` is scrubbed at its write, and this is the same
    rule for what the worker tells Temporal. Decoding is untouched."""

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: PayloadConverter,
        failure: Failure,
    ) -> None:
        try:
            super().to_failure(exception, payload_converter, failure)
        except UnicodeEncodeError:
            # A message carrying bytes that are no UTF-8 (a lone surrogate from a file name or
            # a decoded socket read): the SDK gives up and Temporal is told only that it failed
            # to build the failure. The same failure, its texts made printable, instead.
            failure.Clear()
            super().to_failure(_printable(exception), payload_converter, failure)
        node: Failure | None = failure
        while node is not None:
            node.message = redact(node.message)
            node.stack_trace = redact(node.stack_trace)
            node = node.cause if node.HasField("cause") else None


def _printable(exc: BaseException, depth: int = 0) -> BaseException:
    """`exc` as an `ApplicationError` whose message and cause chain are printable UTF-8, its
    type, retry decision and traceback kept (the guard's non-retryable errors stay so)."""
    if isinstance(exc, ApplicationError):
        copy = ApplicationError(
            printable(exc.message),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
        )
    else:
        copy = ApplicationError(printable(str(exc)), type=type(exc).__name__)
    copy.__traceback__ = exc.__traceback__
    cause = exc.__cause__
    if cause is not None and depth < _CAUSE_DEPTH:
        copy.__cause__ = _printable(cause, depth + 1)
    return copy


# Deeper chains are cut: a cause chain that long says nothing a reader needs.
_CAUSE_DEPTH = 20


def data_converter(settings: Settings) -> DataConverter:
    scrubbing = dataclasses.replace(
        DataConverter.default, failure_converter_class=RedactingFailureConverter
    )
    if not settings.payload_codec:
        return scrubbing
    return dataclasses.replace(scrubbing, payload_codec=load_payload_codec(settings.payload_codec))
