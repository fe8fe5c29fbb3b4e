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
import threading
import time
from collections.abc import Collection, Mapping
from types import TracebackType


def answer(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    """A whole HTTP/1.1 answer (the connection closed after it)."""
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class RawServer:
    """`with RawServer(answers) as server:` serves `server.base_url` until the block ends."""

    def __init__(
        self, answers: Mapping[str, bytes], *, reset: Collection[str] = (), pause: float = 0.3
    ) -> None:
        self.answers, self.reset, self.pause = dict(answers), frozenset(reset), pause
        self.paths: list[str] = []
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> RawServer:
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
        for thread in list(self._threads):
            thread.join()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

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
