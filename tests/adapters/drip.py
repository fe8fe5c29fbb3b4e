"""A raw-socket server on 127.0.0.1 that answers every request with headers that trickle in.

After the status line it sends one header line every `every` seconds for
`seconds`, then ends the headers with a two-byte body: a client bound only
per read (each read's timeout longer than `every`) waits all of `seconds`.
"""

from __future__ import annotations

import contextlib
import socket
import time

from tests.adapters.sockets import SocketServer


class DripServer(SocketServer):
    """`with DripServer(seconds=20) as server:` serves `server.base_url` until the block ends."""

    def __init__(self, *, seconds: float = 20.0, every: float = 0.25) -> None:
        super().__init__()
        self.seconds, self.every = seconds, every

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
