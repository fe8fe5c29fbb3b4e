"""A process-wide setting held while any of several overlapping users needs it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class ProcessWide:
    """Something set for the whole process (stamina's retry hooks, a logging handler) while
    any of several overlapping users (threads, episodes) needs it: the first in sets it, the
    last out undoes it, so one leaving early never takes it from the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._undo: Callable[[], None] | None = None

    @contextlib.contextmanager
    def held(self, install: Callable[[], Callable[[], None]]) -> Iterator[None]:
        """`install()` (which returns how to undo it) unless already held; undone when the last
        holder leaves."""
        with self._lock:
            if self._users == 0:
                self._undo = install()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._undo is not None:
                    undo, self._undo = self._undo, None
                    undo()
