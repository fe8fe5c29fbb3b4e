"""Actions mapped through a `CoordinateFrame`: from the model's grid to screen pixels.

pyautogui code is rewritten only where a coordinate is a numeric literal
(`pyautogui.click(640, 360)`, `moveTo(x=10, y=20)`, `click((5, 6))`, `click([5, 6])`,
`moveTo(x=(5, 6))`; pyautogui imported under another name, or its functions by
`from pyautogui import *`, too); any other expression (`tag_3`, `x + 10`, a
variable) is left exactly as written, since its value is unknown before the code runs. `tag_N` centres come from the
tree in screen pixels and are added after mapping, so they are never mapped.
Code that does not parse as Python is left alone. computer_13 actions have
their `x` and `y` mapped (in OSWorld's nested `parameters` form too); one that
is not a number is refused, never passed on in the model's grid.
"""

from __future__ import annotations

import ast
import bisect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from osharm_core.accessibility import LinearizedTable, parse_pair
from osharm_core.errors import ActionParseError, excerpt, number_excerpt
from osharm_core.frames import CoordinateFrame
from osharm_core.vocabulary import nested_parameters

# Calls whose x and y are absolute: the positions of x and y among the arguments.
_ABSOLUTE: Final = {
    **dict.fromkeys(
        (
            "click",
            "leftClick",
            "doubleClick",
            "tripleClick",
            "rightClick",
            "middleClick",
            "moveTo",
            "dragTo",
            "mouseDown",
            "mouseUp",
        ),
        0,
    ),
    **dict.fromkeys(("scroll", "hscroll", "vscroll"), 1),
}
# Calls whose first two arguments are offsets, mapped by the scale alone.
_RELATIVE: Final = frozenset({"moveRel", "move", "dragRel", "drag"})
# What `from pyautogui import *` brings in, of the calls mapped here: each by its own name.
_POINTER_NAMES: Final = {name: name for name in (*_ABSOLUTE, *_RELATIVE)}


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal (`12`, `-3.5`), or None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            return None
        try:
            value = float(node.value) * sign
        except OverflowError:  # an integer literal past any float: not a pixel
            return None
        return value if math.isfinite(value) else None
    return None


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` but the load/store markers, in no set order (`ast.walk`, without
    its two generators per node: a megabyte of code is some 300,000 nodes)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST) and field != "ctx":
                stack.append(value)


def _pyautogui_calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """Every call of a pyautogui function in `tree`, with the function's name.

    pyautogui goes by `pyautogui`, by `X` after `import pyautogui as X`, and a function
    by `c` after `from pyautogui import click as c`, or by its own name after
    `from pyautogui import *` (wherever in the code the import is).
    """
    modules = {"pyautogui"}
    functions: dict[str, str] = {}
    star = False
    calls: list[ast.Call] = []
    for node in _nodes(tree):
        if isinstance(node, ast.Call):
            calls.append(node)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name == "pyautogui" and a.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "pyautogui" and not node.level:
            star = star or any(a.name == "*" for a in node.names)
            functions.update((a.asname or a.name, a.name) for a in node.names if a.name != "*")
    if star:
        functions = {**_POINTER_NAMES, **functions}
    found = []
    for call in calls:
        name = _called(call, modules, functions)
        if name is not None:
            found.append((name, call))
    return found


def _called(call: ast.Call, modules: set[str], functions: Mapping[str, str]) -> str | None:
    """The pyautogui function `call` calls, if it calls one."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id in modules else None
    if isinstance(func, ast.Name):
        return functions.get(func.id)
    return None


def _point(expr: ast.expr | None) -> list[ast.expr] | None:
    """The two items of a literal pair (`(x, y)` or `[x, y]`), which pyautogui takes as a point."""
    if isinstance(expr, ast.Tuple | ast.List) and len(expr.elts) == 2:
        return list(expr.elts)
    return None


def _axes(call: ast.Call, first: int, names: tuple[str, str]) -> list[tuple[int, ast.expr]]:
    """The (axis, expression) pairs of a call's x and y arguments, where given.

    As in pyautogui, a pair in x's place (positional or `x=`) is the whole point.
    """
    found: list[tuple[int, ast.expr]] = []
    args = call.args
    keywords = [k for k in call.keywords if k.arg in names]
    pair = _point(args[first] if len(args) > first else None)
    if pair is not None:
        return [(0, pair[0]), (1, pair[1])]
    for keyword in keywords:
        pair = _point(keyword.value) if keyword.arg == names[0] else None
        if pair is not None:
            return [(0, pair[0]), (1, pair[1])]
    found += [(axis, args[first + axis]) for axis in (0, 1) if len(args) > first + axis]
    found += [(names.index(k.arg), k.value) for k in keywords if k.arg is not None]
    return found


def _edits(tree: ast.AST, frame: CoordinateFrame) -> list[tuple[ast.expr, str]]:
    edits: list[tuple[ast.expr, str]] = []
    convert: Callable[[float, float], tuple[int, int]]
    for name, node in _pyautogui_calls(tree):
        if name in _ABSOLUTE:
            pairs = _axes(node, _ABSOLUTE[name], ("x", "y"))
            convert = frame.to_screen
        elif name in _RELATIVE:
            pairs = _axes(node, 0, ("xOffset", "yOffset"))
            convert = frame.delta_to_screen
        else:
            continue
        for axis, expr in pairs:
            value = _number(expr)
            if value is None:
                continue
            point = (value, 0.0) if axis == 0 else (0.0, value)
            try:
                edits.append((expr, str(convert(*point)[axis])))
            except (ValueError, OverflowError):
                continue  # too large to be a pixel: left as written
    return edits


# A backslash and what follows it, the pair taken whole (so `\\` is one pair): a `\N{...}`
# name, up to three octal digits, or one character.
_ESCAPE: Final = re.compile(r"\\(N\{[A-Za-z0-9 \-]*\}|[0-7]{1,3}|.)", re.DOTALL)
# What may follow a backslash in both str and bytes literals without a warning (octal digits
# are judged by their value). `\N`, `\u` and `\U` are escapes of str only: bytes warn of them.
_VALID_AFTER_BACKSLASH: Final = frozenset("\\'\"abfnrtvx\n\r")

_DIGITS: Final = r"[0-9](?:_?[0-9])*"
_EXPONENT: Final = rf"[eE][-+]?{_DIGITS}"
# A number token as the tokenizer reads it (longest first, never backtracked into), directly
# followed by a keyword it warns of ("invalid decimal literal": `1if`, `0x1for`, `1.else`).
_NUMBER_BEFORE_KEYWORD: Final = re.compile(
    rf"(?<![0-9A-Za-z_.])(?>0[xX](?:_?[0-9a-fA-F])+|0[bB](?:_?[01])+|0[oO](?:_?[0-7])+"
    rf"|(?:{_DIGITS}\.(?:{_DIGITS})?(?:{_EXPONENT})?|\.{_DIGITS}(?:{_EXPONENT})?"
    rf"|{_DIGITS}{_EXPONENT}|{_DIGITS})[jJ]?)"
    r"(?=and|else|for|if|in|is|not|or)"
)


def _plain_escape(match: re.Match[str]) -> str:
    after = match[1]
    if after.startswith("N{"):
        return "_" * len(match[0])
    if after[0] in "01234567":
        return match[0] if int(after, 8) <= 0o377 else "_" + after
    return match[0] if after in _VALID_AFTER_BACKSLASH else "_" + after


def _starts_token(code: str, at: int) -> bool:
    """Whether a number may start at `at`: not inside a name (the pattern's look-behind keeps
    ASCII out, cheaply) or after a dot."""
    if at == 0:
        return True
    before = code[at - 1]
    return before != "." and not ("a" + before).isidentifier()


def _neutralised(code: str) -> tuple[str, tuple[int, ...]]:
    """`code` with nothing the parser warns of, whatever the warning filters, and where the
    spaces it needed went: a warning is a SyntaxError where warnings are errors (`python -W
    error`, pytest's `filterwarnings = error`), and the mapping must not depend on that.

    Escapes Python does not know in both str and bytes literals (`'\\d'`, `b'\\u00e9'`,
    `'\\777'`, `\\N{...}`) lose their backslash (a name its whole self), in place: offsets
    are kept and only string values change, which hold no coordinate. A number directly
    followed by a keyword (`1if`, `[0x1for ...]`) gets a space before the keyword: such a
    number is an operand, never a coordinate argument. The second item is the offset in
    `code` of each space put in, in order.
    """
    if "\\" in code:
        code = _ESCAPE.sub(_plain_escape, code)
    spaces = tuple(
        m.end() for m in _NUMBER_BEFORE_KEYWORD.finditer(code) if _starts_token(code, m.start())
    )
    if not spaces:
        return code, ()
    pieces: list[str] = []
    done = 0
    for at in spaces:
        pieces += (code[done:at], " ")
        done = at
    pieces.append(code[done:])
    return "".join(pieces), spaces


def reframe_code(code: str, frame: CoordinateFrame | None) -> str:
    """pyautogui `code` with its literal coordinates mapped to screen pixels.

    >>> frame = CoordinateFrame(screen_width=2000, screen_height=1000, image_width=1000, image_height=500)
    >>> reframe_code("pyautogui.click(100, y=50)\\npyautogui.moveTo(tag_1)", frame)
    'pyautogui.click(200, y=100)\\npyautogui.moveTo(tag_1)'
    """
    if frame is None or frame.is_identity or "pyautogui" not in code:
        return code
    parsed, spaces = _neutralised(code)
    try:
        tree = ast.parse(parsed)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    edits = _edits(tree, frame)
    if not edits:
        return code
    starts = [0]
    for line in parsed.encode("utf-8").splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    # Where each space put in stands in `parsed`'s bytes: an offset there, less the spaces
    # before it, is the same place in `code`'s.
    added: list[int] = []
    done = size = 0
    for index, at in enumerate(spaces):
        size += len(code[done:at].encode("utf-8"))
        done = at
        added.append(size + index)
    spans = []
    for expr, replacement in edits:
        assert expr.end_lineno is not None
        assert expr.end_col_offset is not None
        begin = starts[expr.lineno - 1] + expr.col_offset
        end = starts[expr.end_lineno - 1] + expr.end_col_offset
        begin -= bisect.bisect_left(added, begin)
        end -= bisect.bisect_left(added, end)
        spans.append((begin, end, replacement.encode("ascii")))
    data = code.encode("utf-8")
    pieces: list[bytes] = []
    done = 0
    for begin, end, new in sorted(spans):
        pieces += (data[done:begin], new)
        done = end
    pieces.append(data[done:])
    return b"".join(pieces).decode("utf-8")


def _coordinate(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def reframe_computer_13(action: Mapping[str, Any], frame: CoordinateFrame | None) -> Any:
    """A computer_13 action with its `x` and `y` mapped to screen pixels (a new dict).

    The coordinates are the action's own, or those of its `parameters` in OSWorld's
    nested form (`osharm_core.vocabulary.nested_parameters`), which the env runs as
    the flat one. Under a frame that maps anything, an `x` or `y` that is not a
    number the frame maps to a pixel (a string, a bool, NaN, an integer past any float)
    raises `ActionParseError` naming it: left as written it would be read in the model's
    grid, and `parse_reply` makes that reply unparsable, as the parser does NaN.

    >>> frame = CoordinateFrame(screen_width=2000, screen_height=1000, image_width=1000, image_height=500)
    >>> reframe_computer_13({"action_type": "CLICK", "x": 10, "y": 20}, frame)
    {'action_type': 'CLICK', 'x': 20, 'y': 40}
    >>> reframe_computer_13({"action_type": "DRAG_TO", "parameters": {"x": 10, "y": 20}}, frame)
    {'action_type': 'DRAG_TO', 'parameters': {'x': 20, 'y': 40}}
    """
    if frame is None or frame.is_identity:
        return action
    params = nested_parameters(action)
    holder = action if params is None else params
    mapped: dict[str, int] = {}
    for axis, key in enumerate(("x", "y")):
        if key not in holder:
            continue
        value = holder[key]
        where = key if params is None else f"parameters.{key}"
        if not _coordinate(value):
            raise ActionParseError(
                f"{_kind(action)}.{where}: expected a number in the model's grid, got "
                f"{type(value).__name__} {excerpt(value, 60)}"
            )
        point = (value, 0.0) if axis == 0 else (0.0, value)
        try:
            mapped[key] = frame.to_screen(*point)[axis]
        except (ValueError, OverflowError):
            raise ActionParseError(
                f"{_kind(action)}.{where}: {number_excerpt(value)} is no point on the screen"
            ) from None
    if not mapped:
        return action
    if params is None:
        return {**action, **mapped}
    return {**action, "parameters": {**params, **mapped}}


def _kind(action: Mapping[str, Any]) -> str:
    kind = action.get("action_type")
    return kind if isinstance(kind, str) and kind.isidentifier() else excerpt(kind, 30)


def _format(point: tuple[int, int] | tuple[float, float]) -> str:
    return f"({point[0]}, {point[1]})"


def _geometry_in_frame(position: str, size: str, frame: CoordinateFrame) -> str | None:
    """The position and size columns (tab-joined) on the model's grid; None unless both are
    finite pixel pairs."""
    p, s = parse_pair(position), parse_pair(size)
    if p is None or s is None:
        return None
    (x, y), (w, h) = p, s
    try:
        x0, y0 = frame.model_point(x, y)
        x1, y1 = frame.model_point(x + w, y + h)
    except (ValueError, OverflowError):  # not a finite pixel: left as written
        return None
    size_pair = (round(x1 - x0, 4), round(y1 - y0, 4))
    return f"{_format((x0, y0))}\t{_format(size_pair)}"


def reframe_linearized(table: LinearizedTable, frame: CoordinateFrame | None) -> str:
    """`table`'s text with each kept node's position and size in the model's grid.

    Positions go through `frame.model_point`, sizes are the scaled box's extent,
    so a point read off the tree maps back to the same screen pixel. Only the
    rows' own position and size columns change: cell text stays exactly as the
    desktop wrote it, whatever tabs, newlines or pairs it holds. A pair that is
    not a finite pixel is left as written.

    >>> from osharm_core.accessibility import linearize_table
    >>> frame = CoordinateFrame(screen_width=2000, screen_height=1000, image_width=1000, image_height=500)
    >>> tree = (
    ...     '<r xmlns:st="https://accessibility.ubuntu.example.org/ns/state"'
    ...     ' xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
    ...     '<text st:showing="true" st:visible="true" st:editable="true"'
    ...     ' cp:screencoord="(100, 40)" cp:size="(60, 20)">box&#9;(8, 8)&#9;(2, 2)&#10;end</text></r>'
    ... )
    >>> reframe_linearized(linearize_table(tree), frame).splitlines()[1:]
    ['text\\t\\tbox\\t(8, 8)\\t(2, 2)', 'end\\t\\t\\t(50, 20)\\t(30, 10)']
    """
    text = table.text
    if frame is None or frame.is_identity:
        return text
    pieces: list[str] = []
    done = 0
    for position_at, size_at, end in table.geometry:
        mapped = _geometry_in_frame(text[position_at : size_at - 1], text[size_at:end], frame)
        if mapped is not None:
            pieces += (text[done:position_at], mapped)
            done = end
    pieces.append(text[done:])
    return "".join(pieces)


def table_rows(table: str) -> tuple[tuple[int, int, int], ...]:
    """Where the position and size of each line of `table` that ends in `(x, y)\\t(w, h)`
    stand, as `LinearizedTable.geometry` gives a linearized tree's rows.

    For a table known only as text (as a recording keeps it): which lines are
    rows cannot be told from the text, since cell text may hold tabs, newlines
    and pairs, so every line whose last two tab-separated fields are pairs
    (`parse_pair`: ints or floats, any spacing) is taken for a row.

    >>> table = "tag\\tpos\\tsize\\nOK\\t(100, 40)\\t(60, 20)"
    >>> [(table[p : s - 1], table[s:e]) for p, s, e in table_rows(table)]
    [('(100, 40)', '(60, 20)')]
    """
    rows: list[tuple[int, int, int]] = []
    at = 0
    for line in table.split("\n"):
        head, tab, size = line.rpartition("\t")
        start, tab2, position = head.rpartition("\t")
        if tab and tab2 and parse_pair(position) is not None and parse_pair(size) is not None:
            rows.append((at + len(start) + 1, at + len(head) + 1, at + len(line)))
        at += len(line) + 1
    return tuple(rows)


def reframe_table(table: str, frame: CoordinateFrame | None) -> str:
    """A table's text with every line that ends in `(x, y)\\t(w, h)` mapped to the model's grid.

    The rows are `table_rows`'s (every line whose last two tab-separated fields
    are pairs); other lines are left alone. A table linearized here is mapped
    exactly, per node, by `reframe_linearized`.

    >>> frame = CoordinateFrame(screen_width=2000, screen_height=1000, image_width=1000, image_height=500)
    >>> reframe_table("tag\\tname\\tpos\\tsize\\nbutton\\tOK\\t(100, 40)\\t(60, 20)", frame)
    'tag\\tname\\tpos\\tsize\\nbutton\\tOK\\t(50, 20)\\t(30, 10)'
    """
    if frame is None or frame.is_identity:
        return table
    return reframe_linearized(LinearizedTable(table, table_rows(table)), frame)
