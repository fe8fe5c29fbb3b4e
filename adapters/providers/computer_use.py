"""One action vocabulary for every native computer-use protocol, and its two renderings.

Each native protocol (`computer-use-preview` and the GA `computer` tool of the
Responses API, Anthropic's computer tool, Gemini computer use) reads its own
action shapes into `Gesture`s; this module turns gestures into pyautogui code
or computer_13 actions, with no model call and no I/O. The OpenAI action
dicts (`click`, `double_click`, `drag`, `keypress`, `move`, `scroll`, `type`,
`wait`, `screenshot`, with optional held `keys`) are read here by
`read_action`; the other vendors' readers live beside their providers
(`adapters.providers.anthropic_computer`, `adapters.providers.gemini_computer`).

Conventions:

- Every native coordinate reaches the screen through `screen_point`, the one
  place that maps a protocol's coordinates (pixels of the screenshot it saw,
  or Gemini's 0-999 grid) to screen pixels; without a `ScreenMap` the numbers
  are taken as screen pixels and only rounded.
- Scroll amounts are wheel clicks, vertical positive meaning up and
  horizontal positive meaning right, as pyautogui and computer_13 count.
  OpenAI's `scroll_x` / `scroll_y` are pixels with the browser convention
  (positive `scroll_y` scrolls down): one click is `pixels_per_click`
  pixels, rounded away from zero (a non-zero scroll is never lost). A
  scroll of more than `MAX_WHEEL_CLICKS` clicks is refused, whatever the
  protocol.
- Mouse buttons `left`, `right` and `middle` / `wheel` click that button;
  `back` / `forward` have no pyautogui button, so they become the browser
  shortcuts `alt+left` / `alt+right` at the pointer position.
- Keys held during a pointer action (`held`) are pressed before it and let
  go after it, in reverse order.
- `wait` is WAIT (or a short sleep inside a longer block of code);
  `screenshot` and `zoom` produce nothing, since every step already sends a
  fresh screenshot.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from adapters._wire import log_quote
from adapters.errors import UnsupportedComputerAction
from adapters.providers._read import obj, text
from osharm_core.errors import excerpt, is_finite_number, number_excerpt
from osharm_core.vocabulary import KEYBOARD_KEYS

#: pyautogui's name for the key names the vendors send (compared in lower case): browser
#: (`ArrowLeft`, OpenAI's `ARROWLEFT`), X keysym (Anthropic's `Return`, `Page_Up`) and
#: Gemini / Playwright names (`Control`, `Meta`).
_KEY_ALIASES: Final[Mapping[str, str]] = {
    "arrowleft": "left",
    "arrowright": "right",
    "arrowup": "up",
    "arrowdown": "down",
    "left": "left",
    "right": "right",
    "up": "up",
    "down": "down",
    "ctrl": "ctrl",
    "control": "ctrl",
    "control_l": "ctrlleft",
    "control_r": "ctrlright",
    "controlormeta": "ctrl",
    "alt": "alt",
    "alt_l": "altleft",
    "alt_r": "altright",
    "option": "alt",
    "shift": "shift",
    "shift_l": "shiftleft",
    "shift_r": "shiftright",
    "enter": "enter",
    "return": "enter",
    "kp_enter": "enter",
    "esc": "esc",
    "escape": "esc",
    "space": "space",
    "spacebar": "space",
    "tab": "tab",
    "iso_left_tab": "tab",
    "backspace": "backspace",
    "delete": "delete",
    "del": "delete",
    "insert": "insert",
    "home": "home",
    "end": "end",
    "pageup": "pageup",
    "pagedown": "pagedown",
    "page_up": "pageup",
    "page_down": "pagedown",
    "prior": "pageup",
    "next": "pagedown",
    "pgup": "pageup",
    "pgdn": "pagedown",
    "capslock": "capslock",
    "caps_lock": "capslock",
    "numlock": "numlock",
    "num_lock": "numlock",
    "scrolllock": "scrolllock",
    "scroll_lock": "scrolllock",
    "printscreen": "printscreen",
    "print": "printscreen",
    "pause": "pause",
    "menu": "apps",
    "contextmenu": "apps",
    # X keysym and Gemini names of printable characters.
    "minus": "-",
    "plus": "+",
    "equal": "=",
    "equals": "=",
    "period": ".",
    "comma": ",",
    "slash": "/",
    "backslash": "\\",
    "semicolon": ";",
    "colon": ":",
    "apostrophe": "'",
    "quotedbl": '"',
    "grave": "`",
    "asciitilde": "~",
    "exclam": "!",
    "at": "@",
    "numbersign": "#",
    "dollar": "$",
    "percent": "%",
    "asciicircum": "^",
    "ampersand": "&",
    "asterisk": "*",
    "parenleft": "(",
    "parenright": ")",
    "underscore": "_",
    "bracketleft": "[",
    "bracketright": "]",
    "braceleft": "{",
    "braceright": "}",
    "bar": "|",
    "less": "<",
    "greater": ">",
    "question": "?",
}
#: Names of the "command" key; pyautogui calls it `win` on Linux and Windows, `command` on macOS.
_SUPER_KEYS: Final = frozenset(
    {"cmd", "command", "super", "meta", "win", "windows", "super_l", "super_r", "meta_l", "meta_r"}
)
_NAMED_KEYS: Final = frozenset(k for k in KEYBOARD_KEYS if len(k) > 1)
_BUTTONS: Final[Mapping[str, str]] = {
    "left": "left",
    "right": "right",
    "middle": "middle",
    "wheel": "middle",
}
_NAVIGATION_BUTTONS: Final[Mapping[str, str]] = {"back": "left", "forward": "right"}
#: Single characters pyautogui can press: printable ASCII plus tab, newline and return.
_SINGLE_KEYS: Final = frozenset(chr(c) for c in range(32, 127)) | {"\t", "\n", "\r"}
logger = logging.getLogger(__name__)

#: The most native actions one reply may carry; a longer batch is refused as hostile.
MAX_GESTURES: Final = 64
#: The most wheel clicks one scroll may turn (Anthropic's own `scroll_amount` bound); pyautogui
#: turns the wheel once per click, so a larger count would keep the desktop busy for hours.
MAX_WHEEL_CLICKS: Final = 1000


def literal(text: str) -> str:
    """`text` as a Python string literal that never contains a backtick (so no code fence either).

    >>> import ast
    >>> print(literal("a```b"))
    'a\\x60\\x60\\x60b'
    >>> ast.literal_eval(literal("a```b"))
    'a```b'
    """
    return repr(text).replace("`", "\\x60")


def pyautogui_key(name: object, *, platform: str = "linux") -> str:
    """The pyautogui name of one vendor key name (OpenAI, X keysym, Gemini / Playwright).

    >>> pyautogui_key("ARROWLEFT"), pyautogui_key("CTRL"), pyautogui_key("A"), pyautogui_key("CMD")
    ('left', 'ctrl', 'a', 'win')
    >>> pyautogui_key("Page_Down"), pyautogui_key("Return"), pyautogui_key("bracketleft")
    ('pagedown', 'enter', '[')
    """
    if not isinstance(name, str) or not name:
        raise UnsupportedComputerAction(f"key must be a non-empty string, got {name!r}")
    if len(name) == 1:
        if name not in _SINGLE_KEYS:
            raise UnsupportedComputerAction(f"pyautogui cannot press {name!r}")
        return name.lower()
    lowered = name.strip().lower()
    if lowered in _SUPER_KEYS:
        return "command" if platform == "mac" else "win"
    if lowered in _KEY_ALIASES:
        return _KEY_ALIASES[lowered]
    if lowered in _NAMED_KEYS:
        return lowered
    raise UnsupportedComputerAction(f"unknown key name {name!r}")


def key_combo(text: object, *, platform: str = "linux") -> tuple[str, ...]:
    """The keys of a `+`-joined combination (`ctrl+shift+t`, `Control+A`, `ctrl++`).

    >>> key_combo("ctrl+shift+T"), key_combo("ctrl++"), key_combo("+")
    (('ctrl', 'shift', 't'), ('ctrl', '+'), ('+',))
    """
    if not isinstance(text, str) or not text.strip():
        raise UnsupportedComputerAction(f"key combination must be a non-empty string, got {text!r}")
    combo = text.strip()
    if combo == "+":
        return ("+",)
    names = [*combo[:-2].split("+"), "+"] if combo.endswith("++") else combo.split("+")
    return tuple(pyautogui_key(n, platform=platform) for n in names)


# --- coordinates: the one place native coordinates become screen pixels --------------


def screen_point(
    x: float,
    y: float,
    *,
    grid: tuple[int, int],
    sent_size: tuple[int, int],
    screen_size: tuple[int, int],
) -> tuple[int, int]:
    """Screen pixels of a native point; the only native-coordinate -> screen-pixel mapping.

    `grid` is the protocol's coordinate space (the sent screenshot's size for
    pixel protocols, `(1000, 1000)` for Gemini's 0-999 grid), `sent_size` the
    screenshot the model saw, `screen_size` the screen the provider knows of.
    The point goes grid -> sent-image pixels -> screen pixels. The native
    providers pass the sent size as `screen_size`: when the screenshot was
    scaled, the step's `CoordinateFrame` maps the converted actions from sent
    pixels to the real screen (`osharm_core.reframe`, in `complete_step`), the
    same way it maps any model's reply. Points outside the grid raise
    `UnsupportedComputerAction`; the result is rounded half up and kept on
    the screen.

    >>> screen_point(500, 999, grid=(1000, 1000), sent_size=(1920, 1080), screen_size=(1920, 1080))
    (960, 1079)
    >>> screen_point(10.5, 3, grid=(1280, 720), sent_size=(1280, 720), screen_size=(1920, 1080))
    (16, 5)
    """
    grid_w, grid_h = grid
    if not (0 <= x <= grid_w and 0 <= y <= grid_h):
        raise UnsupportedComputerAction(
            f"point ({x:g}, {y:g}) lies outside the {grid_w}x{grid_h} coordinate space"
        )
    sent_x, sent_y = x * sent_size[0] / grid_w, y * sent_size[1] / grid_h
    screen_x = sent_x * screen_size[0] / sent_size[0]
    screen_y = sent_y * screen_size[1] / sent_size[1]
    return (
        min(max(math.floor(screen_x + 0.5), 0), screen_size[0] - 1),
        min(max(math.floor(screen_y + 0.5), 0), screen_size[1] - 1),
    )


@attrs.frozen
class ScreenMap:
    """A protocol's coordinate space, the screenshot the model saw, and the screen (see `screen_point`)."""

    grid: tuple[int, int]
    sent_size: tuple[int, int]
    screen_size: tuple[int, int]

    @classmethod
    def pixels(cls, size: tuple[int, int]) -> ScreenMap:
        """A pixel protocol that saw the screen unscaled."""
        return cls(size, size, size)

    def point(self, x: float, y: float) -> tuple[int, int]:
        """Screen pixels of the native point `(x, y)`."""
        return screen_point(
            x, y, grid=self.grid, sent_size=self.sent_size, screen_size=self.screen_size
        )

    def length(self, amount: float, axis: int) -> float:
        """Screen pixels of a native distance along `axis` (0: x, 1: y)."""
        return amount * self.screen_size[axis] / self.grid[axis]


def number(value: object, where: str) -> float:
    """A finite JSON number, or `UnsupportedComputerAction` naming `where`.

    >>> number(10**400, "click: x")
    Traceback (most recent call last):
    ...
    adapters.errors.UnsupportedComputerAction: click: x must be a number, got 10000000000000000000...(401 characters)
    """
    if not is_finite_number(value):
        raise UnsupportedComputerAction(f"{where} must be a number, got {number_excerpt(value)}")
    return cast(float, value)


def string_arg(args: Mapping[str, Any], field: str, where: str, *, blank: bool = True) -> str:
    """The string `field` of a native action's arguments; anything else (a blank string too,
    unless `blank`) is an `UnsupportedComputerAction` naming `where`.

    >>> string_arg({"text": "hi"}, "text", "type"), string_arg({"url": 7}, "url", "navigate")
    Traceback (most recent call last):
    ...
    adapters.errors.UnsupportedComputerAction: navigate: field 'url' must be a string, got 7
    """
    value = args.get(field)
    if not isinstance(value, str) or not (blank or value.strip()):
        kind = "a string" if blank else "a non-blank string"
        raise UnsupportedComputerAction(
            f"{where}: field {field!r} must be {kind}, got {excerpt(value)}"
        )
    return value


def native_point(x: object, y: object, where: str, screen: ScreenMap | None) -> tuple[int, int]:
    """Screen pixels of a native point read from a reply (plain rounding without a `ScreenMap`)."""
    fx, fy = number(x, f"{where}: x"), number(y, f"{where}: y")
    if screen is None:
        return math.floor(fx + 0.5), math.floor(fy + 0.5)
    try:
        return screen.point(fx, fy)
    except UnsupportedComputerAction as exc:
        raise UnsupportedComputerAction(f"{where}: {exc}") from None


# --- one reading of an action, rendered in either action space ----------------------


@attrs.frozen
class Gesture:
    """One computer-use action, read and checked once: what to do, where, with what.

    `kind` is one of `wait`, `click` (with `button`), `double_click`,
    `triple_click`, `move`, `mouse_down`, `mouse_up` (with `button`),
    `navigate` (a back / forward button: the browser shortcut at the
    pointer), `drag`, `keys` (one key or a combination), `key_down`,
    `key_up`, `scroll`, `type` or `zoom` (a closer look at a region: no
    action). `points` holds the pointer position (the whole path of a drag,
    the two corners of a zoom; may be empty where the pointer stays);
    `button`, `keys`, `scroll` (horizontal, vertical wheel clicks, vertical
    positive meaning up), `text` and `held` (keys held during a pointer
    action) the rest.
    """

    kind: str
    points: tuple[tuple[int, int], ...] = ()
    button: str = "left"
    keys: tuple[str, ...] = ()
    scroll: tuple[int, int] = (0, 0)
    text: str = ""
    held: tuple[str, ...] = ()


def _point(action: Mapping[str, Any], screen: ScreenMap | None) -> tuple[int, int]:
    return native_point(action.get("x"), action.get("y"), str(action.get("type")), screen)


def _list(value: object, where: str, limit: int) -> Sequence[Any]:
    """A non-empty list field of at most `limit` items, or an `UnsupportedComputerAction`."""
    if not isinstance(value, Sequence) or isinstance(value, str) or not 0 < len(value) <= limit:
        raise UnsupportedComputerAction(
            f"{where} must be a list of 1 to {limit} items, got {excerpt(value)}"
        )
    return value


def _path(action: Mapping[str, Any], screen: ScreenMap | None) -> tuple[tuple[int, int], ...]:
    path = _list(action.get("path"), "drag: field 'path'", MAX_GESTURES)
    points = (obj(point) for point in path)  # not an object: no x, refused as no number
    return tuple(native_point(p.get("x"), p.get("y"), "drag", screen) for p in points)


def key_list(keys: object, where: str, platform: str) -> tuple[str, ...]:
    """pyautogui names of a list of 1 to 16 key names (one combination)."""
    keys = _list(keys, f"{where}: field 'keys'", 16)
    try:
        return tuple(pyautogui_key(k, platform=platform) for k in keys)
    except UnsupportedComputerAction as exc:
        raise UnsupportedComputerAction(f"{where}: {exc}") from None


def _held(action: Mapping[str, Any], platform: str) -> tuple[str, ...]:
    keys = action.get("keys")
    return () if keys is None or keys == [] else key_list(keys, str(action["type"]), platform)


def _button(action: Mapping[str, Any]) -> str:
    button = (text(action.get("button", "left")) or "").lower()
    if button not in _BUTTONS and button not in _NAVIGATION_BUTTONS:
        raise UnsupportedComputerAction(
            f"click: unknown mouse button {excerpt(action.get('button'))}"
        )
    return button


def wheel_clicks(pixels: object, pixels_per_click: float) -> int:
    """Wheel clicks for a scroll of `pixels`, rounded away from zero; more than `MAX_WHEEL_CLICKS` is refused.

    >>> wheel_clicks(250, 100), wheel_clicks(-30, 100), wheel_clicks(0, 100)
    (3, -1, 0)
    """
    pixels = number(pixels, "scroll: amount")
    clicks = math.ceil(abs(pixels) / pixels_per_click)
    if clicks > MAX_WHEEL_CLICKS:
        raise UnsupportedComputerAction(
            f"scroll: {number_excerpt(pixels)} pixels is more than {MAX_WHEEL_CLICKS} wheel clicks "
            f"of {pixels_per_click:g} pixels"
        )
    return clicks if pixels >= 0 else -clicks


def _scroll_clicks(action: Mapping[str, Any], pixels_per_click: int) -> tuple[int, int]:
    """(horizontal, vertical) clicks; vertical positive means up, as pyautogui counts."""
    dx = wheel_clicks(action.get("scroll_x", 0), pixels_per_click)
    dy = -wheel_clicks(action.get("scroll_y", 0), pixels_per_click)
    return dx, dy


def _kind(action: Mapping[str, Any]) -> str:
    kind = text(obj(action).get("type"))
    if kind is None:
        raise UnsupportedComputerAction(f"computer_call action has no type: {excerpt(action)}")
    return kind


def read_action(
    action: Mapping[str, Any],
    *,
    platform: str = "linux",
    pixels_per_click: int = 100,
    screen: ScreenMap | None = None,
) -> Gesture | None:
    """The `Gesture` of one OpenAI computer action (preview or GA), or `None` for a screenshot.

    >>> read_action({"type": "click", "button": "wheel", "x": 1.6, "y": 2})
    Gesture(kind='click', points=((2, 2),), button='middle', keys=(), scroll=(0, 0), text='', held=())
    """
    kind = _kind(action)
    if kind == "screenshot":
        return None
    if kind == "wait":
        return Gesture("wait")
    if kind == "click":
        button = _button(action)
        held = _held(action, platform)
        if button in _NAVIGATION_BUTTONS:
            keys = ("alt", _NAVIGATION_BUTTONS[button])
            return Gesture("navigate", (_point(action, screen),), keys=keys, held=held)
        return Gesture("click", (_point(action, screen),), button=_BUTTONS[button], held=held)
    if kind in ("double_click", "move"):
        return Gesture(kind, (_point(action, screen),), held=_held(action, platform))
    if kind == "drag":
        return Gesture("drag", _path(action, screen), held=_held(action, platform))
    if kind == "keypress":
        return Gesture("keys", keys=key_list(action.get("keys"), "keypress", platform))
    if kind == "scroll":
        clicks = _scroll_clicks(action, pixels_per_click)
        held = _held(action, platform)
        return Gesture("scroll", (_point(action, screen),), scroll=clicks, held=held)
    if kind == "type":
        return Gesture("type", text=string_arg(action, "text", "type"))
    raise UnsupportedComputerAction(f"unknown computer_call action type {kind!r}")


def _at(points: tuple[tuple[int, int], ...]) -> str:
    return f"{points[0][0]}, {points[0][1]}" if points else ""


def _plain_code(gesture: Gesture) -> str:
    points = gesture.points
    match gesture.kind:
        case "wait":
            return "WAIT"
        case "zoom":
            return ""
        case "click" if gesture.button == "left":
            return f"pyautogui.click({_at(points)})"
        case "click":
            sep = ", " if points else ""
            return f"pyautogui.click({_at(points)}{sep}button={gesture.button!r})"
        case "double_click":
            return f"pyautogui.doubleClick({_at(points)})"
        case "triple_click":
            return f"pyautogui.tripleClick({_at(points)})"
        case "move":
            return f"pyautogui.moveTo({_at(points)})"
        case "mouse_down" | "mouse_up":
            name = "mouseDown" if gesture.kind == "mouse_down" else "mouseUp"
            sep = ", " if points else ""
            return f"pyautogui.{name}({_at(points)}{sep}button={gesture.button!r})"
        case "navigate":
            return f"pyautogui.moveTo({_at(points)})\npyautogui.hotkey('alt', {gesture.keys[1]!r})"
        case "drag":
            return _drag_code(points)
        case "keys" if len(gesture.keys) == 1:
            return f"pyautogui.press({literal(gesture.keys[0])})"
        case "keys":
            return f"pyautogui.hotkey({', '.join(literal(k) for k in gesture.keys)})"
        case "key_down":
            return f"pyautogui.keyDown({literal(gesture.keys[0])})"
        case "key_up":
            return f"pyautogui.keyUp({literal(gesture.keys[0])})"
        case "scroll":
            dx, dy = gesture.scroll
            lines = [f"pyautogui.moveTo({_at(points)})"] if points else []
            lines += [f"pyautogui.scroll({dy})"] if dy else []
            lines += [f"pyautogui.hscroll({dx})"] if dx else []
            return "\n".join(lines)
        case _:
            return f"pyautogui.typewrite({literal(gesture.text)})"


def gesture_code(gesture: Gesture) -> str:
    """A gesture as pyautogui code (lines joined by newlines), `"WAIT"`, or `""` (nothing to do)."""
    code = _plain_code(gesture)
    if not gesture.held or not code:
        return code
    down = [f"pyautogui.keyDown({literal(k)})" for k in gesture.held]
    up = [f"pyautogui.keyUp({literal(k)})" for k in reversed(gesture.held)]
    return "\n".join((*down, code, *up))


def _plain_actions(gesture: Gesture) -> tuple[dict[str, Any], ...]:
    points = gesture.points
    at = {"x": points[0][0], "y": points[0][1]} if points else {}
    move = ({"action_type": "MOVE_TO", **at},) if points else ()
    match gesture.kind:
        case "wait":
            return ({"action_type": "WAIT"},)
        case "zoom":
            return ()
        case "click":
            return ({"action_type": "CLICK", **at, "button": gesture.button, "num_clicks": 1},)
        case "double_click":
            return ({"action_type": "DOUBLE_CLICK", **at},)
        case "triple_click":
            return ({"action_type": "CLICK", **at, "button": "left", "num_clicks": 3},)
        case "move":
            return ({"action_type": "MOVE_TO", **at},)
        case "mouse_down" | "mouse_up":
            kind = "MOUSE_DOWN" if gesture.kind == "mouse_down" else "MOUSE_UP"
            return (*move, {"action_type": kind, "button": gesture.button})
        case "navigate":
            return (*move, {"action_type": "HOTKEY", "keys": list(gesture.keys)})
        case "drag":
            return _drag_actions(points)
        case "keys" if len(gesture.keys) == 1:
            return ({"action_type": "PRESS", "key": gesture.keys[0]},)
        case "keys":
            return ({"action_type": "HOTKEY", "keys": list(gesture.keys)},)
        case "key_down":
            return ({"action_type": "KEY_DOWN", "key": gesture.keys[0]},)
        case "key_up":
            return ({"action_type": "KEY_UP", "key": gesture.keys[0]},)
        case "scroll":
            dx, dy = gesture.scroll
            return (*move, {"action_type": "SCROLL", "dx": dx, "dy": dy})
        case _:
            return ({"action_type": "TYPING", "text": gesture.text},)


def gesture_actions(gesture: Gesture) -> tuple[dict[str, Any], ...]:
    """A gesture as computer_13 actions, in order (empty for a zoom)."""
    actions = _plain_actions(gesture)
    if not gesture.held or not actions:
        return actions
    down = tuple({"action_type": "KEY_DOWN", "key": k} for k in gesture.held)
    up = tuple({"action_type": "KEY_UP", "key": k} for k in reversed(gesture.held))
    return (*down, *actions, *up)


def to_pyautogui(
    action: Mapping[str, Any], *, platform: str = "linux", pixels_per_click: int = 100
) -> str | None:
    """One OpenAI action as pyautogui code (lines joined by newlines), `"WAIT"`, or `None` (screenshot).

    >>> to_pyautogui({"type": "click", "button": "left", "x": 10, "y": 20})
    'pyautogui.click(10, 20)'
    >>> to_pyautogui({"type": "keypress", "keys": ["CTRL", "C"]})
    "pyautogui.hotkey('ctrl', 'c')"
    """
    gesture = read_action(action, platform=platform, pixels_per_click=pixels_per_click)
    return None if gesture is None else gesture_code(gesture)


def _drag_code(path: tuple[tuple[int, int], ...]) -> str:
    (x0, y0), rest = path[0], path[1:]
    lines = [f"pyautogui.moveTo({x0}, {y0})"]
    if len(rest) == 1:
        x1, y1 = rest[0]
        lines.append(f"pyautogui.dragTo({x1}, {y1}, duration=0.5, button='left')")
    elif rest:
        lines.append("pyautogui.mouseDown(button='left')")
        lines.extend(f"pyautogui.moveTo({x}, {y}, duration=0.2)" for x, y in rest)
        lines.append("pyautogui.mouseUp(button='left')")
    return "\n".join(lines)


def to_computer_13(
    action: Mapping[str, Any], *, platform: str = "linux", pixels_per_click: int = 100
) -> tuple[dict[str, Any], ...]:
    """One OpenAI action as computer_13 actions, in order (empty for a screenshot).

    >>> to_computer_13({"type": "double_click", "x": 5, "y": 6})
    ({'action_type': 'DOUBLE_CLICK', 'x': 5, 'y': 6},)
    """
    gesture = read_action(action, platform=platform, pixels_per_click=pixels_per_click)
    return () if gesture is None else gesture_actions(gesture)


def _drag_actions(path: tuple[tuple[int, int], ...]) -> tuple[dict[str, Any], ...]:
    (x0, y0), rest = path[0], path[1:]
    actions: list[dict[str, Any]] = [{"action_type": "MOVE_TO", "x": x0, "y": y0}]
    if len(rest) == 1:
        x1, y1 = rest[0]
        actions.append({"action_type": "DRAG_TO", "x": x1, "y": y1})
    elif rest:
        actions.append({"action_type": "MOUSE_DOWN", "button": "left"})
        actions.extend({"action_type": "MOVE_TO", "x": x, "y": y} for x, y in rest)
        actions.append({"action_type": "MOUSE_UP", "button": "left"})
    return tuple(actions)


# --- a whole reply's gestures as the reply text the core parses ----------------------

_STEP_PAUSE: Final = "time.sleep(0.5)"
_WAIT_PAUSE: Final = "time.sleep(2)"
_SPECIAL: Final = frozenset({"WAIT", "DONE", "FAIL"})


def _json_block(content: str) -> str:
    # Backticks only occur inside JSON strings, where \u0060 means the same and cannot close a fence.
    return "```json\n" + content.replace("`", "\\u0060") + "\n```"


def gestures_code(gestures: Iterable[Gesture]) -> str:
    """A reply's gestures as one pyautogui block (steps half a second apart), or `WAIT`.

    >>> print(gestures_code([Gesture("click", ((1, 2),)), Gesture("wait"), Gesture("type", text="a")]))
    ```python
    pyautogui.click(1, 2)
    time.sleep(0.5)
    time.sleep(2)
    time.sleep(0.5)
    pyautogui.typewrite('a')
    ```
    """
    code = [c for c in map(gesture_code, gestures) if c]
    if all(c == "WAIT" for c in code):
        return "WAIT"
    lines = [_WAIT_PAUSE if c == "WAIT" else c for c in code]
    return "```python\n" + f"\n{_STEP_PAUSE}\n".join(lines) + "\n```"


def gestures_computer_13(gestures: Iterable[Gesture]) -> str:
    """A reply's gestures as computer_13 json blocks, one per action (`WAIT` when there are none)."""
    converted = [d for g in gestures for d in gesture_actions(g)] or [{"action_type": "WAIT"}]
    return "\n".join(_json_block(json.dumps(d, ensure_ascii=False)) for d in converted)


#: `{` and `}` as full-width look-alikes, which no JSON reader takes for an object.
_INERT_BRACES: Final = str.maketrans({"{": "\uff5b", "}": "\uff5d"})


def _reads_as_special(line: str) -> bool:
    """Whether `line` is WAIT / DONE / FAIL (any case) once its `;` and whitespace are dropped,
    as the pyautogui parser drops them from a whole reply before anything else."""
    pieces = [p.strip() for p in line.split(";") if p.strip()]
    return len(pieces) == 1 and pieces[0].upper() in _SPECIAL


def _reads_as_json(text: str) -> bool:
    """Whether `text` as a whole is a JSON document (one nested past the parser's stack too)."""
    try:
        json.loads(text)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True


def quote_thought(text: str, action_space: str = "computer_13") -> str:
    """Model prose made inert for the action parsers: no fences, no line that reads as
    WAIT / DONE / FAIL (`DONE;` included), and in computer_13 (whose parser reads a reply
    without blocks as JSON and searches its prose for objects) no braces and no prose that
    is a JSON document as a whole (`"DONE"`, `["FAIL"]`: its first line is quoted).

    >>> quote_thought("Done.\\nDONE\\n```python\\nx\\n```")
    "Done.\\n> DONE\\n'''python\\nx\\n'''"
    >>> print(quote_thought('Not {"action_type": "WAIT"}'), quote_thought("{}", "pyautogui"))
    Not ｛"action_type": "WAIT"｝ {}
    >>> quote_thought("DONE;"), quote_thought('["FAIL"]'), quote_thought('"DONE"', "pyautogui")
    ('> DONE;', '> ["FAIL"]', '"DONE"')
    """
    if action_space == "computer_13":
        text = text.translate(_INERT_BRACES)
    lines = []
    for line in text.replace("```", "'''").splitlines():
        lines.append(f"> {line}" if _reads_as_special(line) else line)
    quoted = "\n".join(lines)
    if action_space == "computer_13" and _reads_as_json(quoted):
        return f"> {quoted}"
    return quoted


def signal(word: str, action_space: str) -> str:
    """DONE / FAIL as the reply's action: a line of its own, or a json block for computer_13.

    (In computer_13 a reply without blocks is read as JSON, so the thought must stay out of it.)
    """
    return _json_block(word) if action_space == "computer_13" else word


def early_stop(reason: str | None, natural: Collection[str]) -> str | None:
    """`reason` when it is not one of the protocol's `natural` ends of a turn, else None.

    A reply that gives no reason counts as a natural end.

    >>> early_stop("max_tokens", ("end_turn",)), early_stop("end_turn", ("end_turn",)), early_stop(None, ())
    ('max_tokens', None, None)
    """
    return None if reason is None or reason in natural else reason


def reply_text(
    thoughts: Sequence[str],
    gestures: Sequence[Gesture] | None,
    action_space: str,
    *,
    notes: Sequence[str] = (),
    refuse: bool = False,
    stopped: str | None = None,
) -> str:
    """The reply the core parses: the quoted thoughts and notes, then the actions.

    `gestures` is None when the model made no call at all: it is done
    (DONE) unless `stopped` names an early stop (a token limit reached, a
    filter: see `early_stop`), after which the reply holds the thoughts and
    no action at all. `refuse` ends the reply with FAIL instead of the
    actions (a pending safety check withholds the flagged call).
    """
    thought = quote_thought("\n\n".join((*thoughts, *notes)), action_space)
    prefix = f"{thought}\n\n" if thought else ""
    if gestures is None and stopped is not None:
        logger.warning(
            "a computer-use reply without calls stopped early (%s): no action this step, not DONE",
            log_quote(stopped),
        )
        return thought
    if gestures is None:
        return prefix + signal("DONE", action_space)
    if refuse:
        return prefix + signal("FAIL", action_space)
    if len(gestures) > 16 * MAX_GESTURES:  # each native call expands to a few gestures at most
        raise UnsupportedComputerAction(f"{len(gestures)} gestures in one reply")
    if action_space == "computer_13":
        return prefix + gestures_computer_13(gestures)
    return prefix + gestures_code(gestures)


__all__ = [
    "MAX_GESTURES",
    "MAX_WHEEL_CLICKS",
    "Gesture",
    "ScreenMap",
    "UnsupportedComputerAction",
    "early_stop",
    "gesture_actions",
    "gesture_code",
    "gestures_code",
    "gestures_computer_13",
    "key_combo",
    "key_list",
    "literal",
    "native_point",
    "number",
    "pyautogui_key",
    "quote_thought",
    "read_action",
    "reply_text",
    "screen_point",
    "signal",
    "string_arg",
    "to_computer_13",
    "to_pyautogui",
    "wheel_clicks",
]
