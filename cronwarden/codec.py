"""The optional payload codec (`CRONWARDEN_PAYLOAD_CODEC=module:attribute`).

A codec encodes every payload the client and the worker send to Temporal (workflow inputs,
results, memos, activity arguments), so the server and its database only ever hold what the
codec made of them: the usual hook for encryption. Off by default.
"""

from __future__ import annotations

import dataclasses
import importlib

from temporalio.converter import DataConverter, PayloadCodec

from cronwarden.config import Settings
from cronwarden.errors import InvalidInput


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


def data_converter(settings: Settings) -> DataConverter:
    if not settings.payload_codec:
        return DataConverter.default
    return dataclasses.replace(
        DataConverter.default, payload_codec=load_payload_codec(settings.payload_codec)
    )
