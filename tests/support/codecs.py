"""A payload codec for the tests: compresses every payload and marks it with its own encoding,
as an encrypting codec would. Named by
CRONWARDEN_PAYLOAD_CODEC=tests.support.codecs:CompressingCodec."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/cronwarden-test-zlib"


class CompressingCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": ENCODING}, data=zlib.compress(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                decoded.append(p)  # written before the codec was turned on
                continue
            inner = Payload()
            inner.ParseFromString(zlib.decompress(p.data))
            decoded.append(inner)
        return decoded


NOT_A_CODEC = object()


def codec_without_its_key() -> PayloadCodec:
    """A codec factory whose configuration is missing, as an encrypting codec's key may be."""
    raise LookupError("CODEC_KEY is not set")
