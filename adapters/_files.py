"""Reading and writing the files the adapters are pointed at, safely (an edge module: files).

`read_regular` is the one bounded reader: every input file (a trajectory, an
observation, a task's JSON, a price table) goes through it, so a FIFO, a
device such as /dev/zero or a huge file gets a typed error naming the file,
never a hang or a `MemoryError`. `create_file` is the one writer of a fresh
file: it never follows a symbolic link nor writes over a file already there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

#: The largest JSON input read whole (a task list, a task config, a task.json, a price table).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024


def read_regular(path: Path, what: str, limit: int, error: type[Exception] = ValueError) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes; an `error`
    naming `what` and the file otherwise.

    A FIFO (which would block) or a device such as /dev/zero (which never ends)
    is refused, not read. `FileNotFoundError` passes through; other `OSError`s
    become `error`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise error(f"cannot read {what} {path}: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} {path} is not a regular file")
        if info.st_size > limit:
            raise error(f"{what} {path} is {info.st_size} bytes, over the {limit}-byte limit")
        chunks: list[bytes] = []
        size = 0
        # Reads sized by fstat (one read, usually); one byte more than `limit` shows growth.
        while chunk := os.read(fd, min(limit + 1 - size, max(info.st_size + 1 - size, 1 << 16))):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew since fstat
                raise error(f"{what} {path} is over the {limit}-byte limit")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {_reason(exc)}") from None
    finally:
        os.close(fd)


def create_file(path: Path, data: bytes, error: type[Exception] = ValueError) -> None:
    """Write `data` to a new file at `path` and fsync it.

    Nothing already at `path` is followed or written over: a file, a symbolic
    link (dangling or not) or a FIFO there raises `error` naming it. When the
    write fails part-way (a full disk) the new file is removed and the
    `OSError` re-raised.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        raise error(f"{path} already exists; not writing over it") from None
    try:
        try:
            rest = memoryview(data)
            while rest:
                rest = rest[os.write(fd, rest) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _reason(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
