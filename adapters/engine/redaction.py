"""Keys kept out of httpx's and httpcore's own log records while the calls carrying them run.

With DEBUG logging on, httpcore logs every reply's headers
(`receive_response_headers.complete return_value=(..., [(b'x-echo', b'sk-...')])`),
so a server that echoes the request's key in a header (hostile, or a proxy
misconfigured) would put it in the log. `redacting(secrets)` registers the
secrets of one try for as long as it runs; a filter on the `httpx` and
`httpcore` loggers (installed on first use) replaces every registered secret
in their records' text with `[redacted]`, as the client's own errors do. The
filter runs only for records those loggers actually emit, so it costs nothing
while their level is above DEBUG and INFO.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Final

from adapters._wire import redact

#: The loggers httpx and httpcore write to (a filter on a logger does not cover its children).
_LOGGERS: Final = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.connection_pool",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)


class _Redactor(logging.Filter):
    """Takes every registered secret out of the records of the loggers it is installed on."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # each secret: how many tries under way carry it
        self._secrets: tuple[str, ...] = ()
        self._installed = False

    def add(self, secrets: tuple[str, ...]) -> None:
        with self._lock:
            counts = self._counts
            for secret in secrets:
                counts[secret] = counts.get(secret, 0) + 1
            if len(counts) != len(self._secrets):
                self._secrets = tuple(counts)
            if not self._installed:
                self._install()

    def remove(self, secrets: tuple[str, ...]) -> None:
        with self._lock:
            counts = self._counts
            for secret in secrets:
                left = counts.pop(secret) - 1
                if left:
                    counts[secret] = left
            if len(counts) != len(self._secrets):
                self._secrets = tuple(counts)

    def _install(self) -> None:
        names = set(_LOGGERS) | {
            name
            for name in list(logging.root.manager.loggerDict)
            if name.startswith(("httpx.", "httpcore."))
        }
        for name in sorted(names):
            logging.getLogger(name).addFilter(self)
        self._installed = True

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if secrets:
            message = record.getMessage()
            clean = redact(message, secrets)
            if clean != message:
                record.msg, record.args = clean, None
        return True


_REDACTOR: Final = _Redactor()


@contextlib.contextmanager
def redacting(secrets: tuple[str, ...]) -> Iterator[None]:
    """`with redacting(secrets):` no httpx or httpcore log record written inside (in any
    thread) shows one of `secrets`."""
    if not secrets:
        yield
        return
    _REDACTOR.add(secrets)
    try:
        yield
    finally:
        _REDACTOR.remove(secrets)


__all__ = ["redacting"]
