"""The statement splitter as it was before its per-line rework (commit a99ccf1), kept as the
oracle the differential property test compares `osharm_core.parsing.split_statements` with."""

from __future__ import annotations

import bisect
import re
from typing import Final

#: What the statement splitter steps over in one go: a `;`, a comment, or a
#: string literal. A backslash always shields the next character (in raw
#: strings too, which is why prefixes never change where a string ends); a
#: single-quoted string also ends at a line break; an unterminated string runs
#: to the end. Every string alternative always matches once it has started, so
#: the regex never backtracks.
_INDENT: Final = re.compile(r"[^\S\n]*")
_CODE_TOKEN: Final = re.compile(
    r"""
      ;
    | \#[^\n]*
    | '''(?:[^'\\]|\\[\s\S]?|'(?!''))*(?:'''|\Z)
    | \"\"\"(?:[^"\\]|\\[\s\S]?|"(?!""))*(?:\"\"\"|\Z)
    | '(?:[^'\\\n]|\\[\s\S]?)*'?
    | "(?:[^"\\\n]|\\[\s\S]?)*"?
    """,
    re.VERBOSE,
)


def _scan(code: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Top-level `;` positions and the spans of strings that contain a line break."""
    semicolons: list[int] = []
    multiline: list[tuple[int, int]] = []
    for token in _CODE_TOKEN.finditer(code):
        text = token.group()
        if text == ";":
            semicolons.append(token.start())
        elif text[0] != "#" and "\n" in text:
            multiline.append(token.span())
    return semicolons, multiline


def _string_around(pos: int, multiline: list[tuple[int, int]], starts: list[int]) -> int:
    """The start of the multi-line string `pos` lies strictly inside, or -1."""
    index = bisect.bisect_left(starts, pos) - 1
    return multiline[index][0] if index >= 0 and multiline[index][1] > pos else -1


def _indent_of(
    code: str,
    line_start: int,
    multiline: list[tuple[int, int]],
    starts: list[int],
    known: dict[int, str],
) -> str:
    """The indentation of the statement a line belongs to.

    A line that begins inside a multi-line string takes the indentation of
    the line that string started on (and so on back). `known` remembers every
    line worked out, so a chain of strings is walked once in all, not once
    per line.
    """
    chain: list[int] = []
    while line_start not in known:
        string_start = _string_around(line_start, multiline, starts)
        if string_start < 0:
            match = _INDENT.match(code, line_start)
            known[line_start] = match.group() if match else ""
            break
        chain.append(line_start)
        line_start = code.rfind("\n", 0, string_start) + 1
    indent = known[line_start]
    for line in chain:
        known[line] = indent
    return indent


def split_statements(code: str) -> str:
    """Put each `;`-separated statement on a line of its own, keeping strings intact.

    Only a `;` outside string literals and comments separates statements.
    The pieces of a line keep that line's indentation (a line that begins
    inside a multi-line string takes the indentation of the line the string
    started on); empty pieces are dropped; lines with no `;` stay as they were.

    >>> split_statements("    a(); b('x; y')  # c; d")
    "    a()\\n    b('x; y')  # c; d"
    """
    if ";" not in code:
        return code
    semicolons, multiline = _scan(code)
    if not semicolons:
        return code
    # `out` is joined with line breaks: runs of untouched lines go in as one
    # slice, each split line as its pieces.
    out: list[str] = []
    starts = [start for start, _ in multiline]
    indents: dict[int, str] = {}
    previous_end = -1
    index = 0
    while index < len(semicolons):
        line_start = code.rfind("\n", 0, semicolons[index]) + 1
        line_end = code.find("\n", semicolons[index])
        line_end = len(code) if line_end < 0 else line_end
        if line_start > previous_end + 1:
            out.append(code[previous_end + 1 : line_start - 1])
        head = code[line_start : semicolons[index]].rstrip()
        if head.strip():
            out.append(head)
        piece_start = semicolons[index] + 1
        index += 1
        pieces: list[str] = []
        while index < len(semicolons) and semicolons[index] < line_end:
            pieces.append(code[piece_start : semicolons[index]].strip())
            piece_start = semicolons[index] + 1
            index += 1
        tail = code[piece_start:line_end]
        # A line that ends inside a multi-line string must keep that string's text.
        in_string = _string_around(line_end, multiline, starts) >= 0
        pieces.append(tail.lstrip() if in_string else tail.strip())
        indent = _indent_of(code, line_start, multiline, starts, indents)
        out.extend(indent + piece for piece in pieces if piece)
        previous_end = line_end
    if previous_end < len(code):
        out.append(code[previous_end + 1 :])
    return "\n".join(out)
