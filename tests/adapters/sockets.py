"""A threaded raw-socket server on 127.0.0.1: the plumbing `RawServer` and `DripServer` share.

A subclass writes `_answer(conn)`; each connection gets a thread of its own, and
leaving the `with` block stops accepting and waits for every answer to end.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import Self


class SocketServer:
    """`with Server(...) as server:` serves `server.base_url` until the block ends."""

    def __init__(self) -> None:
        #: Connections accepted so far.
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

    def __enter__(self) -> Self:
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
        raise NotImplementedError


__all__ = ["SocketServer"]
