"""A fetched body's ``Content-Encoding`` undone with a limit on the output.

httpx's own decoders inflate each chunk whole: a 1 KB body sent as ``gzip, gzip`` holds
512 MiB, and the env grew by 1 GB before a size check could see it. Here the output stops one
byte past the limit, whatever the encoding: gzip and deflate (zlib), ``br`` when ``brotli`` is
installed (1.2 or later: its output limit), ``zstd`` when ``zstandard`` is (its window capped
at RFC 9659's 8 MiB). A body encoded twice or more is refused: no server of pages needs it.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable

ZSTD_MAX_WINDOW = 8 * 1024 * 1024  # RFC 9659: zstd content coding uses at most an 8 MiB window


class TooLarge(ValueError):
    """The decoded body is over the limit."""


class NotDecodable(ValueError):
    """An encoding that is not read here, stacked encodings, or a corrupt body; says which."""


def _inflate(data: bytes, limit: int, wbits: int) -> bytes:
    """zlib's decoding of ``data`` (every gzip member, for gzip), at most ``limit`` bytes."""
    out = bytearray()
    while data:
        decoder = zlib.decompressobj(wbits)
        chunk = decoder.decompress(data, limit + 1 - len(out))
        while True:
            out += chunk
            if len(out) > limit:
                raise TooLarge
            if not decoder.unconsumed_tail:
                break
            chunk = decoder.decompress(decoder.unconsumed_tail, limit + 1 - len(out))
        if not decoder.eof:
            break  # a truncated body gives what it held
        data = decoder.unused_data if wbits & 16 else b""  # the next gzip member
    return bytes(out)


def _gzip(data: bytes, limit: int) -> bytes:
    return _inflate(data, limit, zlib.MAX_WBITS | 16)


def _deflate(data: bytes, limit: int) -> bytes:
    # "deflate" is zlib's format by the RFC, raw deflate by some servers: the header tells.
    zlib_header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    return _inflate(data, limit, zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)


def _brotli(data: bytes, limit: int) -> bytes:
    import brotli

    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(data, output_buffer_limit=limit + 1))
    while len(out) <= limit and not decoder.is_finished() and not decoder.can_accept_more_data():
        out += decoder.process(b"", output_buffer_limit=limit + 1 - len(out))
    if len(out) > limit:
        raise TooLarge
    return bytes(out)


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    decoder = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    out = bytearray()
    with decoder.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        while chunk := reader.read(limit + 1 - len(out)):
            out += chunk
            if len(out) > limit:
                raise TooLarge
    return bytes(out)


def _available() -> dict[str, Callable[[bytes, int], bytes]]:
    decoders: dict[str, Callable[[bytes, int], bytes]] = {"gzip": _gzip, "deflate": _deflate}
    try:
        import brotli

        brotli.Decompressor().process(b"", output_buffer_limit=1)  # 1.2 or later
        decoders["br"] = _brotli
    except (ImportError, TypeError, AttributeError):
        pass
    try:
        import zstandard  # noqa: F401

        decoders["zstd"] = _zstd
    except ImportError:
        pass
    return decoders


DECODERS = _available()
ACCEPT_ENCODING = ", ".join(DECODERS)  # what a fetch asks for: what it can bound


def decode(data: bytes, content_encoding: str, limit: int) -> bytes:
    """``data`` with ``content_encoding`` undone, at most ``limit`` bytes of it.

    Raises ``TooLarge`` past the limit, ``NotDecodable`` (saying why) for an encoding not read
    here, more than one encoding, or a body its encoding cannot read.
    """
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return data
    if len(codings) > 1:
        raise NotDecodable(f"it is compressed {len(codings)} times ({content_encoding})")
    decoder = DECODERS.get(codings[0])
    if decoder is None:
        raise NotDecodable(f"its encoding {codings[0]!r} is not read here ({ACCEPT_ENCODING} are)")
    try:
        return decoder(data, limit)
    except TooLarge:
        raise
    except Exception as exc:  # zlib.error, brotli.error, zstandard.ZstdError: a corrupt body
        raise NotDecodable(f"its {codings[0]} body is corrupt ({exc})") from None
