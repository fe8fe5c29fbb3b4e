"""A raw-socket server on 127.0.0.1 that answers every request with headers that trickle in.

After the status line it sends one header line every `every` seconds for
`seconds`, then ends the headers with a two-byte body: a client bound only
per read (each read's timeout longer than `every`) waits all of `seconds`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class DripServer:
    """`with DripServer(seconds=20) as server:` serves `server.base_url` until the block ends."""

    def __init__(self, *, seconds: float = 20.0, every: float = 0.25) -> None:
        self.seconds, self.every = seconds, every
        self.requests = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> DripServer:
        self._accepting.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._accepting.join()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            with self._lock:
                self.requests += 1
                self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(1.0)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            end = time.monotonic() + self.seconds
            while time.monotonic() < end:
                conn.sendall(b"X-Slow: a\r\n")
                if self._stop.wait(self.every):
                    return
            conn.sendall(b"Content-Length: 2\r\n\r\nok")


__all__ = ["DripServer"]
