"""The reference's reading of fenced computer_13 blocks, written the slow and obvious way:
try every place, every length of the opening whitespace (longest first), every content
length (shortest first), as a backtracking pattern matcher would. The oracle the linear
`osharm_core.parsing._reference_blocks` is compared with."""

from __future__ import annotations


def _match_at(text: str, at: int, opening: str) -> tuple[int, int, str] | None:
    """The block opened at `at`: `opening`, whitespace, the shortest content, whitespace and
    a fence; None when there is none."""
    after = at + len(opening)
    spaces = 0
    while after + spaces < len(text) and text[after + spaces].isspace():
        spaces += 1
    for taken in range(spaces, 0, -1):
        start = after + taken
        for end in range(start, len(text)):
            fence = end
            while fence < len(text) and text[fence].isspace():
                fence += 1
            if fence > end and text.startswith("```", fence):
                return at, fence + 3, text[start:end]
    return None


def blocks(text: str, opening: str) -> list[tuple[int, int, str]]:
    """Every block, searched left to right, each after the end of the one before."""
    found: list[tuple[int, int, str]] = []
    pos = 0
    while (at := text.find(opening, pos)) >= 0:
        block = _match_at(text, at, opening)
        if block is None:
            pos = at + 1
        else:
            found.append(block)
            pos = block[1]
    return found
