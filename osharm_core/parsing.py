"""Model replies to actions: pyautogui code blocks, set-of-marks code, computer_13 JSON.

Every function here is total over strings: any string goes in, a value comes out,
nothing raises (a reply that is not a string is a `TypeError`). Every scan is one left-to-right pass (str.find jumps and regexes that
never backtrack), and the search for JSON objects in prose decodes only
balanced, shallowly nested candidates, so the work grows linearly with the reply.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import numbers
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import attrs
from returns.result import Failure, Result, Success

from osharm_core.errors import ActionParseError, ConfigError, excerpt, items_of
from osharm_core.state import MAX_INT_BITS, Action, Mask
from osharm_core.vocabulary import SPECIAL_WORDS

_FENCE: Final = "```"
#: A language tag: one word (letters, digits, `_`) alone on the opening fence line, as the
#: reference reads one (`c++`, `python-repl` or `#` there are code); any whitespace may
#: follow it (a non-breaking space, a form feed, a `\r`).
_LANGUAGE_TAG: Final = re.compile(r"[ \t]*(\w+)[^\S\n]*")
#: A one-line block holding a word and whitespace only (```` ```py ``` ````): that word is a
#: tag, as the reference reads it, and the block is empty.
_TAG_ONLY: Final = re.compile(r"(\w+)\s+")
#: Objects inside more balanced objects than this are not searched for embedded actions.
_MAX_SEARCH_DEPTH: Final = 16
#: JSON values nested deeper than this are not actions (computer_13 needs 2 levels).
MAX_ACTION_DEPTH: Final = 16
#: The most code actions one reply gives; the rest are dropped (and counted, see
#: `code_actions`), so set-of-marks prefixes cannot multiply a reply's size.
MAX_ACTIONS_PER_REPLY: Final = 100


@attrs.frozen
class Block:
    """One fenced block: its number in the reply (from 1), language tag ("" if none), content."""

    number: int
    tag: str
    content: str


@attrs.frozen
class Fenced:
    """A reply split into its fenced blocks and the lines standing wholly outside them.

    `spans` are the `(start, end)` offsets of every pair of fences, empty blocks included.
    """

    blocks: tuple[Block, ...]
    spans: tuple[tuple[int, int], ...] = attrs.field(repr=False)
    text: str = attrs.field(repr=False)

    @property
    def outside_lines(self) -> tuple[str, ...]:
        """The lines of the reply that no pair of fences touches."""
        return tuple(_lines_outside(self.text, self.spans))


def _special_word(text: str) -> str | None:
    """WAIT, FAIL or DONE when that is all `text` holds (surrounding whitespace aside), else None."""
    word = text.strip()
    return word if word in SPECIAL_WORDS else None


def _special_words_outside(text: str, spans: Iterable[tuple[int, int]]) -> list[str]:
    """The special words standing alone on lines wholly outside `spans`, in order."""
    if not any(word in text for word in SPECIAL_WORDS):
        return []
    return [word for word in map(_special_word, _lines_outside(text, spans)) if word is not None]


def _reply(text: object) -> str:
    """`text`, which must be a string (the parsers are total over strings, not over anything)."""
    if not isinstance(text, str):
        raise TypeError(f"a model reply must be a str; got {type(text).__name__} {excerpt(text)}")
    return text


def _split_tag(number: int, raw: str) -> Block:
    newline = raw.find("\n")
    match = _TAG_ONLY.fullmatch(raw) if newline < 0 else _LANGUAGE_TAG.fullmatch(raw, 0, newline)
    if match is None or match.group(1) in SPECIAL_WORDS:
        return Block(number, "", raw)
    return Block(number, match.group(1), raw[newline + 1 :] if newline >= 0 else "")


def _lines_outside(text: str, spans: Iterable[tuple[int, int]]) -> list[str]:
    """The lines of `text` that no span (sorted by start; they may overlap) touches."""
    lines: list[str] = []
    pos = 0
    for start, end in [*spans, (len(text), len(text))]:
        pieces = text[pos:start].split("\n")
        # A piece cut by a span is part of a fence line, not a line of its own.
        lines.extend(pieces[0 if pos == 0 else 1 : None if start == len(text) else -1])
        pos = max(pos, end)
    return lines


def split_fences(text: str) -> Fenced:
    """Split a reply into fenced blocks (paired in order) and the lines outside them.

    The first fence after an opening one closes it; an opening fence with no
    partner is ordinary text. Only a single word (letters, digits, `_`) alone
    on the opening fence line, or alone with whitespace in a one-line block, is
    a language tag (WAIT, DONE and FAIL never are). Empty blocks are left out
    but still counted in the block numbers.

    >>> split_fences("Now:\\n```python\\nx = 1\\n```\\nDONE").blocks
    (Block(number=1, tag='python', content='x = 1\\n'),)
    >>> split_fences("Now:\\n```python\\nx = 1\\n```\\nDONE").outside_lines
    ('Now:', 'DONE')
    """
    blocks: list[Block] = []
    spans: list[tuple[int, int]] = []
    opening = text.find(_FENCE)
    closing = -1 if opening < 0 else text.find(_FENCE, opening + 3)
    while closing >= 0:
        spans.append((opening, closing + 3))
        if closing > opening + 3:
            blocks.append(_split_tag(len(spans), text[opening + 3 : closing]))
        opening = text.find(_FENCE, closing + 3)
        closing = -1 if opening < 0 else text.find(_FENCE, opening + 3)
    return Fenced(tuple(blocks), tuple(spans), text)


# --- the statement splitter ------------------------------------------------

#: What the statement splitter steps over in one go: a comment or a string
#: literal. A backslash always shields the next character (in raw strings too,
#: which is why prefixes never change where a string ends); a single-quoted
#: string also ends at a line break; an unterminated string runs to the end.
#: Every alternative always matches once it has started, so nothing backtracks.
_STRING_OR_COMMENT: Final = r"""
      \#[^\n]*
    | '''(?:[^'\\]|\\[\s\S]?|'(?!''))*(?:'''|\Z)
    | \"\"\"(?:[^"\\]|\\[\s\S]?|"(?!""))*(?:\"\"\"|\Z)
    | '(?:[^'\\\n]|\\[\s\S]?)*'?
    | "(?:[^"\\\n]|\\[\s\S]?)*"?
"""
#: Code up to the next `;` or line break outside strings and comments: plain text, then
#: strings or comments each followed by plain text.
_CODE: Final = rf"""[^;\n'"\#]*+(?:(?:{_STRING_OR_COMMENT})[^;\n'"\#]*+)*+"""
#: A statement and what ends it: a `;`, a line break with all the following lines that
#: have no `;` (outside strings and comments), or nothing at the end of the code.
_STATEMENT: Final = re.compile(rf"""({_CODE})(;|\n(?:{_CODE}\n)*+|)""", re.VERBOSE)
_INDENT: Final = re.compile(r"[^\S\n]*")


def _logical_lines(code: str) -> Iterator[list[str]]:
    """The lines of `code` (cut at line breaks outside strings), each as its `;`-separated
    statements; a run of lines with no `;` comes as one statement."""
    statements: list[str] = []
    for statement, separator in _STATEMENT.findall(code):
        statements.append(statement)
        if separator == ";":
            continue
        yield statements
        if not separator:
            return  # findall may add one more, empty, match at the very end
        if len(separator) > 1:
            yield [separator[1:-1]]
        statements = []


def _split_logical_line(statements: list[str], out: list[str]) -> None:
    """Append the lines a logical line of two or more statements becomes to `out`.

    Its line breaks are all inside strings, so every piece takes the indentation
    of its first line. A statement's first line ends the line of the `;` before
    it, its last line begins the line of the `;` after it, and the lines between
    (holding no `;`) stay as they are.
    """
    match = _INDENT.match(statements[0])
    indent = match.group() if match else ""
    last = len(statements) - 1
    for number, statement in enumerate(statements):
        if "\n" not in statement:
            piece = statement.rstrip() if number == 0 else statement.strip()
            if piece:
                out.append(piece if number == 0 else indent + piece)
            continue
        first, *between, final = statement.split("\n")
        if number == 0:
            out.append(first)
        elif first.strip():
            # Its line ends inside a string, which must keep its text.
            out.append(indent + first.lstrip())
        out.extend(between)
        if number == last:
            out.append(final)
        elif final.strip():
            out.append(final.rstrip())


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
    out: list[str] = []
    for statements in _logical_lines(code):
        if len(statements) == 1:
            out.append(statements[0])
        else:
            _split_logical_line(statements, out)
    return "\n".join(out)


# --- pyautogui replies ------------------------------------------------------


def _block_actions(content: str) -> list[str]:
    """The actions of a stripped block: a special word, code, or code and then the special
    word on its last line (the code's lines kept as written, a CRLF's `\r` included)."""
    word = _special_word(content)
    if word is not None:
        return [word]
    lines = content.split("\n")
    word = _special_word(lines[-1])
    if word is None:
        return [content] if content else []
    return ["\n".join(lines[:-1]), word]


@attrs.frozen
class CodeActions:
    """The code actions of a reply, and how many past the limit were left out."""

    actions: tuple[str, ...]
    dropped: int = 0


def code_actions(
    text: str,
    masks: Sequence[Mask] | None = None,
    *,
    limit: int = MAX_ACTIONS_PER_REPLY,
) -> CodeActions:
    """The code actions of a reply (with `masks`, set-of-marks style), the first `limit` kept.

    `parse_code_from_string` and `parse_code_from_som_string` give these
    actions; `dropped` counts those past the limit.

    The set-of-marks prefix is added to the kept actions only, so the output is
    at most `limit` prefixes longer than the reply.

    >>> code_actions("WAIT\\nDONE", limit=1)
    CodeActions(actions=('WAIT',), dropped=1)
    """
    text = _reply(text)
    whole = "\n".join(p.strip() for p in text.split(";") if p.strip())
    word = _special_word(whole)
    if word is not None:
        found = [word]
    else:
        fenced = split_fences(text)
        found = []
        for block in fenced.blocks:
            code = _inline_tagged(block, _INLINE_CODE_TAG).content
            found.extend(_block_actions(split_statements(code).strip()))
        found.extend(_special_words_outside(text, fenced.spans))
    kept = found[:limit]
    if masks is not None:
        kept = with_som_prefix(kept, som_prefix(masks))
    return CodeActions(tuple(kept), len(found) - len(kept))


def with_som_prefix(actions: Iterable[str], prefix: str) -> list[str]:
    """`actions` with `prefix` before each one that is code: not a special word, whatever
    whitespace surrounds it (a block's `DONE\\r` stays bare, as the reference leaves it).

    >>> with_som_prefix(["x()", "DONE\\r"], "tag_1=(2, 2)\\n")
    ['tag_1=(2, 2)\\nx()', 'DONE\\r']
    """
    return [action if _special_word(action) else prefix + action for action in actions]


def parse_code_from_string(text: str) -> list[str]:
    """The pyautogui actions of a reply: fenced code blocks and WAIT / DONE / FAIL.

    A reply that is only a special word gives that word. Each block's
    top-level `;` become line breaks (see `split_statements`); a block that is
    a special word, or ends with one on its last line, gives the word as an
    action of its own. Special words on lines of their own outside the blocks
    follow the block actions. No code and no special word gives `[]`. At most
    `MAX_ACTIONS_PER_REPLY` actions are given (see `code_actions`).

    >>> parse_code_from_string("Click it.\\n```python\\npyautogui.click(5, 5); time.sleep(1)\\n```")
    ['pyautogui.click(5, 5)\\ntime.sleep(1)']
    >>> parse_code_from_string("```\\npyautogui.press('enter')\\nDONE\\n```")
    ["pyautogui.press('enter')", 'DONE']
    """
    return list(code_actions(text).actions)


def som_prefix(masks: Sequence[Mask]) -> str:
    """The `tag_N=(x, y)` lines that define each mark's centre, numbered from 1.

    >>> som_prefix([(10, 20, 5, 7)])
    'tag_1=(12, 23)\\n'

    A `masks` that is not a sequence of `(x, y, w, h)` boxes of finite numbers is a
    `ConfigError` naming the box.
    """
    boxes = items_of(masks)
    if boxes is None:
        raise ConfigError(f"masks must be a sequence of (x, y, w, h) boxes; got {excerpt(masks)}")
    return "".join(_tag_line(n, mask) for n, mask in enumerate(boxes, start=1))


def _finite_real(value: object) -> bool:
    """Whether `value` is a finite real number, not a bool (numpy's numbers count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _tag_line(n: int, mask: object) -> str:
    box = items_of(mask)
    if box is None or len(box) != 4 or not all(_finite_real(v) for v in box):
        raise ConfigError(
            f"masks[{n - 1}] must be an (x, y, w, h) box of finite numbers; got {excerpt(mask)}"
        )
    # As Python numbers: numpy's small integers would wrap around (uint8 250 + 10 is 4).
    x, y, w, h = (int(v) if isinstance(v, numbers.Integral) else float(v) for v in box)  # type: ignore[arg-type]
    return f"tag_{n}=({int(x + w // 2)}, {int(y + h // 2)})\n"


def parse_code_from_som_string(text: str, masks: Sequence[Mask]) -> list[str]:
    """`parse_code_from_string` with the `tag_N` definitions put before every code action.

    >>> parse_code_from_som_string("```\\npyautogui.click(tag_1)\\n```\\nDONE", [(0, 0, 4, 4)])
    ['tag_1=(2, 2)\\npyautogui.click(tag_1)', 'DONE']
    """
    return list(code_actions(text, masks).actions)


# --- computer_13 replies ----------------------------------------------------


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]!r} is too large")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    value = int(text)
    if value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"an integer of {len(text):,} digits is too large")
    return value


# Reads JSON as `json.loads` does, except that NaN, Infinity, numbers too large for a float
# and integers past `MAX_INT_BITS` are errors (an action holding them could not be stored
# and written back as JSON).
_DECODER: Final = json.JSONDecoder(
    parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant
)


def _too_deep(value: Any, limit: int = MAX_ACTION_DEPTH) -> bool:
    """Whether `value` nests objects and arrays more than `limit` levels deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        if children and depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _json_error(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, RecursionError):
        return "invalid JSON: nested too deeply"
    return f"invalid JSON: {exc}"


def _load(text: str) -> tuple[Any, str | None]:
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        return None, _json_error(exc)
    if _too_deep(value):
        return None, f"JSON nested more than {MAX_ACTION_DEPTH} levels deep"
    return value, None


def _is_action(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, str) and value in SPECIAL_WORDS)


def _as_actions(value: Any) -> list[Action] | None:
    """An object or a special word (a JSON string) as one action, a non-empty list of them as
    its items in order; None for anything else (a list holding any other value included)."""
    if _is_action(value):
        return [value]
    if isinstance(value, list) and value and all(map(_is_action, value)):
        return list(value)
    return None


def _excerpt(text: str, limit: int = 80) -> str:
    start = text.strip()
    return repr(start if len(start) <= limit else start[:limit] + "...")


#: `json`, whitespace, and content on the opening fence line itself (```json {...} ```).
_INLINE_JSON_TAG: Final = re.compile(r"(json)[^\S\n]+(?=\S)", re.IGNORECASE)
#: `python` (`python3`, `py`), whitespace, and code on the opening fence line itself
#: (```python pyautogui.click(1, 2)```): left in, the code could never run.
_INLINE_CODE_TAG: Final = re.compile(r"(python3?|py)[^\S\n]+(?=\S)", re.IGNORECASE)


def _inline_tagged(block: Block, tag: re.Pattern[str]) -> Block:
    """`block`, with a `tag` word that opens its fence line and has content after it on
    that line read as its tag (a one-line fence; elsewhere only a word alone is a tag)."""
    match = None if block.tag else tag.match(block.content)
    if match is None:
        return block
    return Block(block.number, match.group(1), block.content[match.end() :])


def _block_json_actions(fenced: Fenced) -> Result[list[Action], ActionParseError]:
    blocks = [_inline_tagged(block, _INLINE_JSON_TAG) for block in fenced.blocks]
    chosen = [b for b in blocks if b.tag.lower() == "json"] or blocks
    actions: list[Action] = []
    for block in chosen:
        content = block.content.strip()
        word = _special_word(content)
        if word is not None:
            actions.append(word)
            continue
        if not content:
            continue
        value, error = _load(content)
        if error is not None:
            return Failure(ActionParseError(f"block {block.number}: {error}"))
        found = _as_actions(value)
        if found is None:
            return Failure(
                ActionParseError(
                    f"block {block.number}: expected a JSON object, WAIT, DONE or FAIL, "
                    f"or a list of these, got {type(value).__name__} {_excerpt(content, 40)}"
                )
            )
        actions.extend(found)
    return Success(actions)


_BRACE_EVENT: Final = re.compile(r'[{}"]')
_JSON_STRING_STOP: Final = re.compile(r'[\\"\n]')


def _object_spans(text: str) -> list[tuple[int, int, int]]:
    """`(start, end, depth)` of each balanced `{...}` in prose, sorted by start.

    Strings are tracked only inside braces, only from a quote where JSON
    could open one, and end at a line break (JSON strings hold none), so a
    stray quote in the prose cannot hide the objects after it.
    """
    spans: list[tuple[int, int, int]] = []
    open_at: list[int] = []
    pos = 0  # where scanning resumes: past the end of a string just skipped
    for match in _BRACE_EVENT.finditer(text):
        at = match.start()
        if at < pos:
            continue
        char = match.group()
        if char == "{":
            open_at.append(at)
        elif not open_at:
            continue
        elif char == "}":
            spans.append((open_at.pop(), at + 1, 0))
        elif _opens_json_string(text, at):
            pos = _json_string_end(text, at + 1)
    spans.sort()
    # A span's depth is how many balanced spans hold it: a `{` never closed encloses nothing.
    ends: list[int] = []
    for index, (start, end, _) in enumerate(spans):
        while ends and ends[-1] <= start:
            ends.pop()
        spans[index] = (start, end, len(ends))
        ends.append(end)
    return spans


def _opens_json_string(text: str, at: int) -> bool:
    """Whether the quote at `at` can open a JSON string (it follows `{`, `[`, `,` or `:`)."""
    before = at - 1
    while before >= 0 and text[before] in " \t\r\n":
        before -= 1
    return before >= 0 and text[before] in "{[,:"


def _json_string_end(text: str, pos: int) -> int:
    while True:
        match = _JSON_STRING_STOP.search(text, pos)
        if match is None:
            return len(text)
        if match.group() == "\\":
            pos = match.start() + 2
        elif match.group() == "\n":
            return match.start()
        else:
            return match.end()


_ACTION_KEY: Final = '"action_type"'


def _embedded_actions(text: str) -> list[Action]:
    """The objects with an `action_type` embedded in prose, outermost first; only spans that
    hold the key as written are decoded, so prose full of other braces costs one pass."""
    keys = [match.start() for match in re.finditer(_ACTION_KEY, text)]
    if not keys:
        return []
    actions: list[Action] = []
    taken_until = 0
    for start, end, depth in _object_spans(text):
        if start < taken_until or depth > _MAX_SEARCH_DEPTH:
            continue
        first_key = bisect.bisect_left(keys, start)
        if first_key == len(keys) or keys[first_key] + len(_ACTION_KEY) > end:
            continue
        try:
            value, length = _DECODER.raw_decode(text[start:end])
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and "action_type" in value and not _too_deep(value):
            actions.append(value)
            taken_until = start + length
    return actions


#: The reference's block openings: "```json" and bare "```", each followed by whitespace.
_REFERENCE_OPENINGS: Final = (re.compile(r"(```json)\s+"), re.compile(r"(```)\s+"))
#: The reference's closing fences: "```" after whitespace.
_CLOSING_AFTER_SPACE: Final = re.compile(r"(?<=\s)```")


def _reference_blocks(text: str, opening: re.Pattern[str]) -> Iterator[tuple[int, int, str]]:
    """`(start, end, content)` of the blocks the reference's pattern finds, in linear time.

    The reference searches for `opening`, whitespace, the shortest content, whitespace
    and a fence: the content runs from the first character after the whitespace to the
    whitespace before the first fence that follows whitespace; with no such fence, a
    fence right after two or more whitespace characters closes an empty block. A block
    is searched for again only after the end of the last one found; once no fence
    follows whitespace, none is searched for again (none can follow a later opening).
    """
    pos = 0
    closed = True
    for match in opening.finditer(text):
        start = match.end()
        if match.start() < pos:
            continue
        closing = _CLOSING_AFTER_SPACE.search(text, start + 1) if closed else None
        closed = closing is not None
        if closing is not None:
            pos = closing.end()
            yield match.start(), pos, text[start : closing.start()].rstrip()
        elif text.startswith(_FENCE, start) and start - match.end(1) > 1:
            pos = start + 3
            yield match.start(), pos, ""


def _reference_reading(text: str) -> tuple[list[Action], list[tuple[int, int]]] | None:
    """The actions the reference reads in a reply, and the spans of its blocks; None when
    it finds none, or anything that is not an action (see `_as_actions`).

    The reference reads the ```` ```json ```` blocks, else the bare ```` ``` ```` ones
    (see `_reference_blocks`), else the whole reply, as JSON. A block holding a
    special word gives it here too.
    """
    for opening in _REFERENCE_OPENINGS:
        blocks = _reference_blocks(text, opening)
        first = next(blocks, None)
        if first is not None:
            break
    else:
        found = _as_actions(_load(text)[0])
        return None if found is None else (found, [])
    actions: list[Action] = []
    spans: list[tuple[int, int]] = []
    for start, end, content in itertools.chain([first], blocks):
        word = _special_word(content)
        found = [word] if word is not None else _as_actions(_load(content)[0])
        if found is None:
            return None
        actions.extend(found)
        spans.append((start, end))
    return actions, spans


def _own_reading(text: str, fenced: Fenced) -> Result[list[Action], ActionParseError]:
    """The actions of our reading: the blocks of `fenced`, else the whole reply (as JSON,
    else searched for embedded actions); the special words outside come later."""
    if fenced.blocks:
        return _block_json_actions(fenced)
    return Success(_as_actions(_load(text)[0]) or _embedded_actions(text))


def parse_actions_from_string(text: str) -> Result[list[Action], ActionParseError]:
    """The computer_13 actions of a reply, or a Failure saying why there are none.

    Fenced blocks are read first (only the `json`-tagged ones when any block
    has that tag; "```json {...} ```" on one line counts as tagged): each holds
    one JSON object, a special word (bare or as a JSON string), or a list of
    objects and special-word strings, which gives its items in order. A block
    holding anything else (a list with a number in it) is a Failure. A reply
    without blocks is read as JSON the same way; when it is not such JSON (a
    list holding a number, say), it is searched for embedded objects that have
    an `action_type`. Special words on
    lines of their own outside the blocks come last. Actions are not validated
    here (see `validate_computer_13`).

    When the blocks (or the reply without them) give no action, the reply is read as the reference reads
    it, and its actions are kept when they all are actions: the ```` ```json ````
    blocks (an opening `json` and whitespace, closed by the first fence after
    whitespace, so backticks inside a JSON string do not end the block), else
    the bare ```` ``` ```` blocks opened by whitespace (a ```` ```python ```` block
    repeating the action as code is skipped), else the whole reply.

    >>> parse_actions_from_string('```json\\n{"action_type": "PRESS", "key": "enter"}\\n```')
    <Success: [{'action_type': 'PRESS', 'key': 'enter'}]>
    >>> parse_actions_from_string("DONE")
    <Success: ['DONE']>
    >>> parse_actions_from_string('[{"action_type": "PRESS", "key": "enter"}, "DONE"]')
    <Success: [{'action_type': 'PRESS', 'key': 'enter'}, 'DONE']>
    """
    text = _reply(text)
    word = _special_word(text)
    if word is not None:
        return Success([word])
    fenced = split_fences(text)
    result = _own_reading(text, fenced)
    spans: list[tuple[int, int]] = list(fenced.spans)
    reading = None if result.value_or(None) else _reference_reading(text)
    if reading is not None:
        result = Success(reading[0])
        spans = sorted([*spans, *reading[1]])
    actions = result.value_or(None)
    if actions is None:
        return result
    actions.extend(_special_words_outside(text, spans))
    if not actions:
        return Failure(ActionParseError(f"no computer_13 action found in reply {_excerpt(text)}"))
    return Success(actions)
