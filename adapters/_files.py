"""Reading and writing the files the adapters are pointed at, safely (an edge module: files).

`read_regular` is the one bounded reader: every input file (a trajectory, an
observation, a task's JSON, a price table) goes through it, so a FIFO, a
device such as /dev/zero or a huge file gets a typed error naming the file,
never a hang or a `MemoryError`. `new_file` (and `create_file` on it) is the
one writer of a fresh file: it never follows a symbolic link nor writes over
a file already there. Every `os.O_*` flag goes through `open_flags`, so the
flags an OS lacks (Windows has no `O_NOFOLLOW`, `O_NONBLOCK`, `O_NOCTTY`,
`O_CLOEXEC`) count as none, and `O_BINARY` (Windows only) keeps bytes as they are.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

from adapters.errors import TrajectoryError, UnwritableRecord

#: The largest JSON input read whole (a task list, a task config, a task.json, a price table).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024

#: Flags every open takes where the OS has them: bytes untranslated (`O_BINARY`, Windows),
#: the descriptor closed in child processes (`O_CLOEXEC`).
_ALWAYS: Final = ("O_BINARY", "O_CLOEXEC")


def open_flags(*names: str) -> int:
    """The `os.O_*` flags named, or'ed; one this OS lacks counts as 0.

    >>> open_flags("O_WRONLY", "O_NO_SUCH_FLAG") == os.O_WRONLY
    True
    """
    flags = 0
    for name in names:
        flags |= getattr(os, name, 0)
    return flags


class _Link(OSError):
    """`path` is a symbolic link, and was not to be followed."""


def _no_follow(path: Path) -> int:
    """The flag that makes `os.open` refuse a symbolic link at `path`: `O_NOFOLLOW`, or where the
    OS has none, 0 once `os.lstat` shows `path` is not a link (`_Link` when it is)."""
    flag = open_flags("O_NOFOLLOW")
    if flag:
        return flag
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise _Link
    except FileNotFoundError:
        pass
    return 0


def _is_link(path: Path) -> bool:
    try:
        return path.is_symlink()
    except (OSError, ValueError):
        return False


def read_regular(
    path: Path,
    what: str,
    limit: int,
    error: type[Exception] = ValueError,
    *,
    follow_links: bool = True,
) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes; an `error`
    naming `what` and the file otherwise.

    A FIFO (which would block) or a device such as /dev/zero (which never ends)
    is refused, not read. With `follow_links=False` (a file named by a recording
    or a result folder, never by the user) a symbolic link at `path`, dangling
    or not, is refused too; the default follows one (a file the user names, who
    may have linked it). `FileNotFoundError` passes through; other `OSError`s
    become `error`.
    """
    flags = os.O_RDONLY | open_flags("O_NONBLOCK", "O_NOCTTY", *_ALWAYS)
    try:
        if not follow_links:
            flags |= _no_follow(path)
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        if not follow_links and (isinstance(exc, _Link) or _is_link(path)):
            raise error(f"{what} {path} is a symbolic link; not following it") from None
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


def open_appending(path: Path, error: type[Exception] = ValueError) -> int:
    """A descriptor appending to `path` (made when missing); a symbolic link there, dangling or
    not, is refused (`error` naming it), not followed, and so is a FIFO: it fails at once
    instead of waiting for a reader. The caller checks the file is a regular one."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | open_flags("O_NONBLOCK", *_ALWAYS)
    try:
        return os.open(path, flags | _no_follow(path), 0o666)
    except OSError as exc:
        if not (isinstance(exc, _Link) or _is_link(path)):
            raise
        raise error(
            f"{path} is not a regular file but a symbolic link; not appending through it"
        ) from None


@contextlib.contextmanager
def new_file(
    path: Path, error: type[Exception] = ValueError, *, replace: bool = False
) -> Iterator[BinaryIO]:
    """A new file at `path`, open for writing in binary; flushed and fsynced when the block ends.

    Nothing already at `path` is followed or written over: a file, a symbolic
    link (dangling or not) or a FIFO there raises `error` naming it; with
    `replace` it is removed first (a link itself, never its target). When the
    block raises (a full disk, a body cut short) the new file is removed and
    the exception re-raised.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | open_flags("O_NOFOLLOW", *_ALWAYS)
    if replace:
        path.unlink(missing_ok=True)
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        raise error(f"{path} already exists; not writing over it") from None
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def create_file(
    path: Path, data: bytes, error: type[Exception] = ValueError, *, replace: bool = False
) -> None:
    """Write `data` to a new file at `path` and fsync it (see `new_file`, and its `replace`).

    When the write fails part-way (a full disk) the new file is removed and the
    `OSError` re-raised.
    """
    with new_file(path, error, replace=replace) as out:
        out.write(data)


def _reason(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


# --- records: appended whole, as strict JSON -----------------------------------------


def append_fsynced(path: Path, data: bytes) -> None:
    """Append `data` to the regular file `path` (made when missing; a symbolic link there is
    refused, not followed) and fsync it.

    When that fails part-way (a full disk), the file is cut back to its old
    length before the `OSError` is re-raised, so no half line is left for the
    next append to be glued onto.
    """
    fd = open_appending(path, TrajectoryError)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TrajectoryError(f"{path} is not a regular file; cannot append to it")
        try:
            rest = memoryview(data)
            while rest:
                rest = rest[os.write(fd, rest) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, info.st_size)
            raise
    finally:
        os.close(fd)


def record_json(value: Any, what: str, *, indent: int | None = None) -> str:
    """`value` as the strict JSON text a record holds (readable text, no `NaN`); an
    `UnwritableRecord` naming `what` when JSON cannot hold it (a `NaN`, an object JSON has
    no form for, nesting past the encoder's depth)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnwritableRecord(f"{what} cannot be written as JSON: {exc}") from None


def json_line(value: Any, what: str) -> bytes:
    """`value` as one line of UTF-8 JSON: readable text, or escapes where text is not valid Unicode."""
    text = record_json(value, what)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: \uXXXX escapes round-trip them
        return (json.dumps(value, allow_nan=False) + "\n").encode("ascii")


def utf8(text: str | None) -> bytes | None:
    """A tree as UTF-8; characters that cannot be encoded (lone surrogates) are written as escapes."""
    return None if text is None else text.encode("utf-8", errors="backslashreplace")
