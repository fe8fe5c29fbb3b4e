"""How `osharm-agent` writes: one escaped line per error or record, text safe on a terminal."""

from __future__ import annotations

import io
from typing import Final, TextIO

from adapters._wire import printable
from adapters.errors import error_text

PROG: Final = "osharm-agent"


def one_line(exc: BaseException | str) -> str:
    """An error or its message on one line: lines joined with "; " (after a colon, with a space),
    other control characters escaped (`printable`: a message can quote a hostile task or desktop)."""
    message = exc if isinstance(exc, str) else error_text(exc)
    lines = [" ".join(line.split()) for line in message.splitlines()]
    text = ""
    for line in filter(None, lines):
        text += (" " if not text or text.endswith(":") else "; ") + line
    return printable(text.strip()) or type(exc).__name__


def line(out: TextIO, text: str) -> None:
    """`text` as one output line: names from task.json, observation file names and folders
    quoted in it may hold control characters; they are escaped (see `printable`)."""
    out.write(f"{printable(text)}\n")


def for_reader(text: str, stream: TextIO) -> str:
    """`text` (a reply, a page's words, an instruction) as written to `stream`: on a terminal
    its control characters but newlines and tabs are escaped, so it cannot send the terminal
    an escape sequence; piped or redirected, it is the exact text."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or unusual stream
        terminal = False
    return printable(text, keep="\n\t") if terminal else text


def failed(err: TextIO, message: str, status: int) -> int:
    """Report `message` as the one error line on `err`; return the exit `status`."""
    print(f"{PROG}: error: {message}", file=err)
    return status


def tolerant(stream: TextIO) -> TextIO:
    """`stream`, writing what its encoding cannot hold (lone surrogates in a reply) as escapes."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")
    return stream
