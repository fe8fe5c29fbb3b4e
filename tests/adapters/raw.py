"""A raw-socket server on 127.0.0.1 whose answers are the bytes given, however malformed.

`RawServer({"/accessibility": b"HTTP/1.1 200 OK\\r\\nContent-Length: abc\\r\\n\\r\\n"})`
answers each request for a path with its bytes (one connection per request, closed after
the answer), a 404 for any other path; a path in `reset` has its connection reset (RST,
not a clean close) a moment after its bytes went out, so a client reading the rest of
the body gets a read error. `answer(status, body)` builds a well-formed answer.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Collection, Mapping

from tests.adapters.sockets import SocketServer


def answer(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    """A whole HTTP/1.1 answer (the connection closed after it)."""
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class RawServer(SocketServer):
    """`with RawServer(answers) as server:` serves `server.base_url` until the block ends."""

    def __init__(
        self, answers: Mapping[str, bytes], *, reset: Collection[str] = (), pause: float = 0.3
    ) -> None:
        super().__init__()
        self.answers, self.reset, self.pause = dict(answers), frozenset(reset), pause
        self.paths: list[str] = []

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5.0)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            self.paths.append(path)
            conn.sendall(self.answers.get(path, answer(404, b"no such path")))
            if path in self.reset:
                self._stop.wait(self.pause)  # the client has read the head and waits for more
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                conn.shutdown(socket.SHUT_WR)
                time.sleep(0.05)  # let the client read before the socket goes


__all__ = ["RawServer", "answer"]
