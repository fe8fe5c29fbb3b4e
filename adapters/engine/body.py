"""Reply bodies read within a size limit and a deadline, whatever the server sends.

The client reads every reply as a stream of raw bytes and decodes gzip and
deflate itself, asking zlib for at most the bytes still allowed, so a
compression bomb stops at the limit instead of expanding in memory, a body
larger than the limit (declared or not) stops there, and a server trickling
bytes stops at the call's deadline. Every member of a multi-member gzip body
is decoded (bytes after the last one are ignored, as gzip tools do); deflate
is read as zlib-wrapped or raw, as its first two bytes say. Stacked
encodings (`gzip, gzip`) are refused. Secrets the server echoes back are taken
out of everything it sends (`scrubbed_headers`, `scrub_json`), before any of
it reaches an error, a log or a trajectory.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from adapters._wire import redact
from adapters.errors import (
    DeadlineExceededError,
    ModelCallError,
    ResponseDecodeError,
    ResponseTooLargeError,
)

#: The largest reply body accepted, as sent and once decompressed: 64 MiB.
DEFAULT_MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
#: The encodings the client asks for and can decode.
ACCEPT_ENCODING: Final = "gzip, deflate"

_GZIP: Final = 16 + zlib.MAX_WBITS


def deflate_wbits(head: bytes) -> int:
    """zlib's `wbits` for a deflate body starting with `head` (2 bytes): zlib-wrapped or raw.

    HTTP's deflate is zlib-wrapped, but some servers send raw deflate; a zlib
    header says deflate in its low nibble and makes a multiple of 31.

    >>> deflate_wbits(bytes([0x78, 0x9C])), deflate_wbits(bytes([0xCB, 0x48]))
    (15, -15)
    """
    wrapped = len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
    return zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS


class BodyReader:
    """Collects one reply body from its raw chunks, within `limit` bytes and before `deadline`.

    `deadline` is a `time.monotonic()` value (`None`: no deadline). `feed`
    raises `ResponseTooLargeError` (naming `setting`, the option that sets
    `limit`) or `DeadlineExceededError` as soon as a limit is passed;
    `finish` gives the decoded body. With `sink`, the decoded bytes go to it
    as they come instead (a file being written), and `finish` gives `b""`.
    """

    def __init__(
        self,
        *,
        provider: str,
        status: int,
        headers: Mapping[str, str],
        limit: int,
        deadline: float | None,
        setting: str = "max_response_bytes",
        sink: Callable[[bytes], object] | None = None,
    ) -> None:
        self._provider = provider
        self._sink = sink
        self._setting = setting
        self._status = status
        self._limit = limit
        self._deadline = deadline
        self._raw = 0
        self._parts: list[bytes] = []
        self._size = 0
        encoding = headers.get("content-encoding", "identity").strip().lower() or "identity"
        self._decoder: Any = None
        # Deflate's first two bytes, until both have come (they say raw or zlib-wrapped).
        self._head: bytes | None = None
        self._gzip = encoding in ("gzip", "x-gzip")
        # gzip members begun so far; True once they have ended and only trailing bytes come.
        self._members = 0
        self._trailing = False
        if self._gzip:
            self._decoder, self._members = zlib.decompressobj(_GZIP), 1
        elif encoding == "deflate":
            self._head = b""
        elif encoding != "identity":
            accepted = f"only {ACCEPT_ENCODING} are accepted"
            raise self._error(f"reply uses content-encoding {encoding[:40]!r}; {accepted}")
        declared = headers.get("content-length", "")
        if declared.strip().isdigit() and int(declared) > limit:
            raise self._too_large(f"declares {int(declared)} bytes")

    def _error(
        self, message: str, kind: type[ModelCallError] = ResponseDecodeError
    ) -> ModelCallError:
        return kind(message, provider=self._provider, status=self._status)

    def _too_large(self, what: str) -> ModelCallError:
        over = f"over the limit of {self._limit} bytes ({self._setting})"
        return self._error(f"reply body {what}, {over}", ResponseTooLargeError)

    def _check_time(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            read = f"while reading the reply body ({self._raw} bytes read)"
            raise self._error(f"the call's deadline passed {read}", DeadlineExceededError)

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise self._too_large("decompresses past that")
        if self._sink is not None:
            self._sink(data)
        else:
            self._parts.append(data)

    def feed(self, chunk: bytes) -> None:
        """Take one raw chunk of the body."""
        self._raw += len(chunk)
        if self._raw > self._limit:
            raise self._too_large(f"is over {self._raw - 1} bytes as sent")
        if self._head is not None:
            self._head += chunk
            if len(self._head) < 2:
                self._check_time()
                return
            chunk, self._head = self._head, None
            self._decoder = zlib.decompressobj(deflate_wbits(chunk))
        if self._decoder is None:
            self._keep(chunk)
        elif not self._trailing:
            self._inflate(chunk)
        self._check_time()

    def _inflate(self, chunk: bytes) -> None:
        data = chunk
        while data:
            if self._decoder.eof:
                if not self._gzip:
                    return  # a zlib stream is one stream: what follows it is ignored
                # RFC 1952: a gzip body may hold several members, one after the other.
                self._decoder = zlib.decompressobj(_GZIP)
                self._members += 1
            try:
                out = self._decoder.decompress(data, self._limit - self._size + 1)
            except zlib.error as exc:
                if self._members > 1:
                    self._trailing = True  # bytes after the last member, as gzip tools allow
                    return
                raise self._error(f"reply body is not valid compressed data ({exc})") from None
            self._keep(out)
            data = self._decoder.unconsumed_tail or self._decoder.unused_data

    def finish(self) -> bytes:
        """The whole decoded body."""
        self._check_time()
        if self._head:
            self._decoder = zlib.decompressobj(deflate_wbits(self._head))
            self._inflate(self._head)
        if self._decoder is not None and not self._trailing:
            self._keep(self._decoder.flush())
        return b"".join(self._parts)


def scrubbed_headers(headers: Mapping[str, str], secrets: tuple[str, ...]) -> dict[str, str]:
    """Reply `headers` (names lower-cased) with every secret taken out of their values.

    >>> scrubbed_headers({"X-Request-Id": "sk-secret-1"}, ("sk-secret-1",))
    {'x-request-id': '[redacted]'}
    """
    return {name.lower(): redact(value, secrets) for name, value in headers.items()}


def scrub_json(value: Any, secrets: tuple[str, ...]) -> Any:
    """Decoded JSON with every secret taken out of its strings and keys, in place (no recursion).

    >>> scrub_json({"echo": ["key sk-secret-1"]}, ("sk-secret-1",))
    {'echo': ['key [redacted]']}
    """
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in list(item):
                child = item[key]
                if isinstance(child, str):
                    child = redact(child, secrets)
                elif isinstance(child, dict | list):
                    stack.append(child)
                clean = redact(key, secrets)
                if clean != key:
                    del item[key]
                item[clean] = child
        elif isinstance(item, list):
            for index, child in enumerate(item):
                if isinstance(child, str):
                    item[index] = redact(child, secrets)
                elif isinstance(child, dict | list):
                    stack.append(child)
    return value


__all__ = [
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "BodyReader",
    "scrub_json",
    "scrubbed_headers",
]
