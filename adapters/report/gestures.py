"""A step's actions as marks to draw on its screenshot: clicks, drags, scrolls, typing and keys.

Pure: the actions (pyautogui code strings, computer_13 objects, WAIT / DONE / FAIL) go in,
`Mark` values come out, with their points in screen pixels, the pixels the actions name.
pyautogui code is read through Python's `ast` (never run): a call's coordinates are its
numeric literals, or a name the code assigns a literal pair (`tag_3 = (120, 40)`, as a
set-of-marks reply's code begins), or a `tag_N` the step's marks define. A coordinate that
is any other expression cannot be known before the code runs: the action is still listed,
without a point.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from osharm_core.reframe import _ABSOLUTE, _axes, _number, _pyautogui_calls
from osharm_core.vocabulary import SPECIAL_WORDS, nested_parameters

Point = tuple[float, float]
Box = tuple[int, int, int, int]

#: The longest code string read for marks (a longer one is listed, not drawn).
MAX_CODE_CHARS: Final = 100_000
#: The most marks drawn for one step (a reply of a thousand clicks shows the first ones).
MAX_MARKS: Final = 200
#: The largest coordinate drawn (a pixel past any screen is no point of it).
MAX_COORDINATE: Final = 1e6
#: The most characters of typed text, or of a key list, a label shows.
LABEL_CHARS: Final = 60

_CLICKS: Final = {
    "click": "click",
    "leftClick": "click",
    "doubleClick": "double",
    "tripleClick": "triple",
    "rightClick": "right",
    "middleClick": "middle",
}
_POINTER_CALLS: Final = {
    **_CLICKS,
    "moveTo": "move",
    "dragTo": "drag",
    "mouseDown": "down",
    "mouseUp": "up",
}
_TAG: Final = re.compile(r"tag_([0-9]{1,6})")
#: What each kind of mark is called in its label.
KIND_WORDS: Final = {
    "click": "click",
    "double": "double-click",
    "triple": "triple-click",
    "right": "right-click",
    "middle": "middle-click",
    "move": "move",
    "down": "press",
    "up": "release",
    "drag": "drag",
    "scroll": "scroll",
}


@attrs.frozen
class Mark:
    """One action drawn: its `kind` (a `KIND_WORDS` key, or `type`, `key`, `special`, `note`),
    its `label`, the screen point it acts at (`at`; `None`: not known), where a drag started
    (`start`), the set-of-marks tag its point came from, and its number among the step's
    marks that have a point (`None` when it is the only one)."""

    kind: str
    label: str = ""
    at: Point | None = None
    start: Point | None = None
    tag: int | None = None
    number: int | None = None


def clipped(text: str, limit: int = LABEL_CHARS) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut.

    >>> clipped("abcdef", 4)
    'abc…'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _coordinate(value: object) -> float | None:
    match value:
        case bool():
            return None
        case int() | float() if math.isfinite(value) and abs(value) <= MAX_COORDINATE:
            return float(value)
    return None


def _pair(x: object, y: object) -> Point | None:
    px, py = _coordinate(x), _coordinate(y)
    return None if px is None or py is None else (px, py)


def _centre(box: Sequence[int]) -> Point:
    x, y, w, h = box
    return float(x + w // 2), float(y + h // 2)


class _Reader:
    """Turns one step's actions into marks, keeping the pointer's place between them."""

    def __init__(self, masks: Sequence[Box] | None) -> None:
        self.masks = tuple(masks or ())
        self.marks: list[Mark] = []
        self.pointer: Point | None = None
        self.pressed = False
        self.names: dict[str, tuple[Point, int | None]] = {}

    # --- shared ---------------------------------------------------------------------

    def pointed(
        self,
        kind: str,
        at: Point | None,
        tag: int | None = None,
        note: str = "",
        *,
        unknown: bool = False,
    ) -> None:
        """A pointer action at `at` (the pointer's place when `None`, or no place when the
        action names one that cannot be known here, `unknown`); a move or release with the
        button held is a drag from where the pointer was."""
        where = at if at is not None or unknown else self.pointer
        held = self.pressed and kind in ("move", "up") and at is not None
        start = self.pointer if kind == "drag" or held else None
        shown = "drag" if held and kind == "move" and start is not None else kind
        words = [KIND_WORDS[shown]]
        if tag is not None:
            words.append(f"tag {tag}")
        if at is None:
            words.append("at the pointer" if where is not None else "(point not known here)")
        if note:
            words.append(note)
        self.add(Mark(shown, " ".join(words), where, start, tag))
        self.pointer = where
        if kind == "down":
            self.pressed = True
        elif kind in ("up", "click", "double", "triple", "right", "middle"):
            self.pressed = False

    def add(self, mark: Mark) -> None:
        if len(self.marks) < MAX_MARKS:
            self.marks.append(mark)

    def typed(self, text: object) -> None:
        shown = f'type "{clipped(text)}"' if isinstance(text, str) else "type (text not known)"
        self.add(Mark("type", shown))

    def keys(self, verb: str, keys: object) -> None:
        match keys:
            case str():
                names = keys
            case list() | tuple() if all(isinstance(k, str) for k in keys):
                names = "+".join(keys) if verb == "hotkey" else ", ".join(keys)
            case _:
                names = "(keys not known)"
        word = {"hotkey": "keys", "keyDown": "hold", "keyUp": "release"}.get(verb, "press")
        self.add(Mark("key", f"{word} {clipped(names)}"))

    def scrolled(self, amount: float | None, horizontal: bool, at: Point | None) -> None:
        if amount is None:
            way = "(amount not known)"
        elif horizontal:
            way = f"{'right' if amount > 0 else 'left'} {abs(amount):g}"
        else:
            way = f"{'up' if amount > 0 else 'down'} {abs(amount):g}"
        self.add(Mark("scroll", f"scroll {way}", at if at is not None else self.pointer))
        if at is not None:
            self.pointer = at

    # --- pyautogui code ---------------------------------------------------------------

    def code(self, code: str) -> None:
        if len(code) > MAX_CODE_CHARS:
            self.add(Mark("note", f"code of {len(code):,} characters: not drawn"))
            return
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.add(Mark("note", "code that does not parse as Python: not drawn"))
            return
        self._assigned(tree)
        calls = sorted(_pyautogui_calls(tree), key=lambda c: (c[1].lineno, c[1].col_offset))
        for name, call in calls:
            self._call(name, call)

    def _assigned(self, tree: ast.Module) -> None:
        """The names the code assigns a literal point (`tag_3 = (120, 40)`), with their tag."""
        for node in tree.body:
            match node:
                case ast.Assign(targets=[ast.Name(id=name)], value=ast.Tuple(elts=[x, y])):
                    point = _pair(_number(x), _number(y))
                    found = _TAG.fullmatch(name)
                    if point is not None:
                        self.names[name] = (point, int(found[1]) if found else None)

    def _named(self, name: str) -> tuple[Point, int | None] | None:
        if name in self.names:
            return self.names[name]
        found = _TAG.fullmatch(name)
        index = int(found[1]) - 1 if found else -1
        return (_centre(self.masks[index]), index + 1) if 0 <= index < len(self.masks) else None

    def _point(self, call: ast.Call, first: int) -> tuple[Point | None, int | None, bool]:
        """The point a call names at argument `first` (or `x=`), the tag it came from, and
        whether the call names one at all (`False`: it acts where the pointer is)."""
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        head = call.args[first] if len(call.args) > first else keywords.get("x")
        if head is None:
            return None, None, False
        if isinstance(head, ast.Name):
            named = self._named(head.id)
            return (None, None, True) if named is None else (*named, True)
        axes = dict(_axes(call, first, ("x", "y")))
        return _pair(*(_number(axes[a]) if a in axes else None for a in (0, 1))), None, True

    def _call(self, name: str, call: ast.Call) -> None:
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        argument = call.args[0] if call.args else None
        if name in _POINTER_CALLS:
            at, tag, named = self._point(call, _ABSOLUTE[name])
            self.pointed(self._click_kind(name, keywords), at, tag, unknown=named and at is None)
        elif name in ("moveRel", "move", "dragRel", "drag"):
            self._relative(name, call)
        elif name in ("scroll", "vscroll", "hscroll"):
            at, _, _ = self._point(call, 1)
            amount = argument if argument is not None else keywords.get("clicks")
            value = None if amount is None else _coordinate(_number(amount))
            self.scrolled(value, name == "hscroll", at)
        elif name in ("typewrite", "write"):
            text = argument if argument is not None else keywords.get("message")
            self.typed(_literal(text))
        elif name in ("press", "keyDown", "keyUp"):
            self.keys(name, _literal(argument if argument is not None else keywords.get("keys")))
        elif name == "hotkey":
            self.keys(name, [_literal(a) for a in call.args])

    def _click_kind(self, name: str, keywords: Mapping[str, ast.expr]) -> str:
        kind = _POINTER_CALLS[name]
        if kind == "click":
            kind = {"right": "right", "middle": "middle"}.get(
                str(_literal(keywords.get("button"))), kind
            )
            clicks = _literal(keywords.get("clicks"))
            kind = {2: "double", 3: "triple"}.get(clicks if type(clicks) is int else 1, kind)
        return kind

    def _relative(self, name: str, call: ast.Call) -> None:
        axes = dict(_axes(call, 0, ("xOffset", "yOffset")))
        offset = _pair(*(_number(axes[a]) if a in axes else None for a in (0, 1)))
        kind = "drag" if name.startswith("drag") else "move"
        if offset is None or self.pointer is None:
            self.pointed(kind, None, note="by an offset not known here")
            return
        self.pointed(kind, (self.pointer[0] + offset[0], self.pointer[1] + offset[1]))

    # --- computer_13 -----------------------------------------------------------------

    def computer_13(self, action: Mapping[str, Any]) -> None:
        kind = action.get("action_type")
        params = nested_parameters(action) or action
        at = _pair(params.get("x"), params.get("y"))
        pointer_kinds = {
            "CLICK": "click",
            "MOVE_TO": "move",
            "MOUSE_DOWN": "down",
            "MOUSE_UP": "up",
            "RIGHT_CLICK": "right",
            "DOUBLE_CLICK": "double",
            "DRAG_TO": "drag",
        }
        if kind == "CLICK":
            clicks = params.get("num_clicks")
            button = {"right": "right", "middle": "middle"}.get(str(params.get("button")), "click")
            self.pointed({"2": "double", "3": "triple"}.get(str(clicks), button), at)
        elif kind in pointer_kinds:
            self.pointed(pointer_kinds[str(kind)], at)
        elif kind == "SCROLL":
            dx, dy = _coordinate(params.get("dx")), _coordinate(params.get("dy"))
            if dy:
                self.scrolled(dy, False, None)
            if dx:
                self.scrolled(dx, True, None)
        elif kind == "TYPING":
            self.typed(params.get("text"))
        elif kind in ("PRESS", "KEY_DOWN", "KEY_UP"):
            verb = {"KEY_DOWN": "keyDown", "KEY_UP": "keyUp"}.get(str(kind), "press")
            self.keys(verb, params.get("key"))
        elif kind == "HOTKEY":
            self.keys("hotkey", params.get("keys"))
        elif kind in SPECIAL_WORDS:
            self.add(Mark("special", str(kind)))
        else:
            self.add(Mark("note", f"unknown action {clipped(repr(kind), 40)}"))


def _literal(node: ast.expr | None) -> Any:
    """A literal's value (`"enter"`, `["ctrl", "c"]`, `2`), or `None` for any other expression."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def step_marks(
    actions: Sequence[Any] | None, masks: Sequence[Box] | None = None
) -> tuple[Mark, ...]:
    """The marks of one step's actions, in order; those with a point are numbered when there
    are several. `masks` are the step's set-of-marks boxes (`tag_N` is box N's centre).

    >>> [(m.kind, m.at, m.number) for m in step_marks(["pyautogui.click(10, 20)"])]
    [('click', (10.0, 20.0), None)]
    >>> [m.label for m in step_marks([{"action_type": "TYPING", "text": "hi"}, "DONE"])]
    ['type "hi"', 'DONE']
    """
    reader = _Reader(masks)
    for action in actions or ():
        match action:
            case str() if action.strip() in SPECIAL_WORDS:
                reader.add(Mark("special", action.strip()))
            case str():
                reader.code(action)
            case Mapping():
                reader.computer_13(action)
            case _:
                reader.add(Mark("note", f"an action of type {type(action).__name__}"))
    pointed = [m for m in reader.marks if m.at is not None]
    if len(pointed) < 2:
        return tuple(reader.marks)
    numbers = {id(mark): n for n, mark in enumerate(pointed, 1)}
    return tuple(attrs.evolve(m, number=numbers.get(id(m))) for m in reader.marks)


def used_tags(marks: Sequence[Mark]) -> frozenset[int]:
    """The set-of-marks tags the marks' points came from."""
    return frozenset(m.tag for m in marks if m.tag is not None)


__all__ = ["KIND_WORDS", "Mark", "clipped", "step_marks", "used_tags"]
