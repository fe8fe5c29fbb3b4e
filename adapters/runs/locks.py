"""One live run per task folder: a lock file naming its holder, taken over once its holder is gone.

Two runs on one `--out` (a rerun while a cluster job is still alive) both saw an unfinished
folder, both emptied it, both paid for every step, and left it holding one run's
better_log.json and the other's actions. `take_lock` creates `.osharm-lock.json` in the
folder with O_EXCL: the host, process and run that hold it, and since when. Another run
finds it held and leaves the folder alone. A lock is stale when its holder is a process of
this host that no longer exists, or, from another host (a cluster sharing the folder), when
it was not refreshed for `STALE_AFTER` seconds (the holder refreshes it at every step); a
stale lock is taken over by renaming it away first, so two runs finding it stale at once
cannot both take it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import attrs

from adapters._files import open_flags
from adapters.trajectories.result_folders import LOCK_FILE

#: A lock of another host not refreshed for this long (seconds) is stale: far longer than any
#: step (ten 30 s retries, a 10 minute VM revert) between two refreshes.
STALE_AFTER: Final = 3600.0
#: The most of a lock file read (a lock is a line of JSON; anything larger is not one).
_MOST_LOCK_BYTES: Final = 4096


@attrs.frozen
class Holder:
    """Who holds a task folder: its host, process and run, and since when (UTC, ISO 8601)."""

    host: str
    pid: int
    run: str
    since: str

    def describe(self) -> str:
        """The holder in words, for the line that says the folder is held."""
        return f"host {self.host}, pid {self.pid}, since {self.since}"


def _me(run: str) -> Holder:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return Holder(host=socket.gethostname(), pid=os.getpid(), run=run, since=now)


def _read(path: Path) -> Holder | None:
    """The holder a lock file names, `None` when it names none (torn, hostile, not a lock)."""
    try:
        fd = os.open(path, open_flags("O_RDONLY", "O_NOFOLLOW", "O_NONBLOCK"))
    except OSError:
        return None
    try:
        data = os.read(fd, _MOST_LOCK_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        fields = json.loads(data)
        return Holder(
            host=str(fields["host"]), pid=int(fields["pid"]), run=str(fields["run"]),
            since=str(fields["since"]),
        )  # fmt: skip
    except (ValueError, TypeError, KeyError):
        return None


def _alive(pid: int) -> bool:
    """Whether a process of this host with this id exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process: alive; a nonsense id: gone
    return True


def _stale(path: Path, holder: Holder | None) -> bool:
    """Whether the lock at `path` (naming `holder`) is held by no live run."""
    try:
        age = time.time() - path.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return True
    if holder is not None and holder.host == socket.gethostname():
        return not _alive(holder.pid)
    return age > STALE_AFTER


class FolderLock:
    """A run's hold on one task folder: refreshed while it runs, released at its end (the
    folders it made to hold it removed again when nothing else was written there)."""

    def __init__(self, path: Path, holder: Holder, made: tuple[Path, ...] = ()) -> None:
        self.path, self.holder, self.made = path, holder, made

    def refresh(self) -> None:
        """Tell other hosts the holder is alive (the lock's modification time)."""
        with contextlib.suppress(OSError):
            os.utime(self.path)

    def release(self) -> None:
        """Remove the lock, unless another run took it over meanwhile (it judged this one gone)."""
        if _read(self.path) == self.holder:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for folder in self.made:  # deepest first; one that holds anything stays
            with contextlib.suppress(OSError):
                folder.rmdir()


def _create(path: Path, holder: Holder) -> bool:
    """Create the lock naming `holder`; False when a lock is there already."""
    flags = open_flags("O_WRONLY", "O_CREAT", "O_EXCL", "O_NOFOLLOW")
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, (json.dumps(attrs.asdict(holder)) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _take_over(path: Path, stale: Holder | None) -> None:
    """Move the stale lock that names `stale` out of the way; one that was replaced meanwhile
    (another run took it over first) is put back."""
    aside = path.with_name(f"{LOCK_FILE}.stale.{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another run moved it first
        return
    if _read(aside) != stale:  # not the lock judged stale: a live one, given back
        with contextlib.suppress(OSError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)


def take_lock(folder: Path, run: str) -> FolderLock | Holder:
    """The lock on `folder` for the run `run` (an id), or the live holder that has it."""
    made = tuple(p for p in (folder, *folder.parents) if not p.exists())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    me = _me(run)
    for _ in range(3):
        if _create(path, me):
            return FolderLock(path, me, made)
        holder = _read(path)
        if not _stale(path, holder):
            return holder if holder is not None else Holder("unknown", 0, "unknown", "unknown")
        _take_over(path, holder)
    holder = _read(path)
    return Holder("unknown", 0, "unknown", "unknown") if holder is None else holder
