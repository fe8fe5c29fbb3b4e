"""The computer_13 action space, kept once as data.

Both the action prompts' description of the actions and `validate_computer_13`
are derived from `ACTIONS` and `SPECIAL_ACTIONS`; nothing else spells out an
action's parameters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

import attrs
from returns.result import Failure, Result, Success

from osharm_core.errors import check_size, excerpt
from osharm_core.state import Action

#: The screen size the action ranges refer to unless told otherwise.
DEFAULT_SCREEN_SIZE: Final = (1920, 1080)

ParamKind = Literal["number", "integer", "text", "choice", "key", "keys"]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _keyboard_keys() -> tuple[str, ...]:
    punctuation = tuple("\t\n\r !\"#$%&'()*+,-./") + tuple("0123456789")
    punctuation += tuple(":;<=>?@[\\]^_`") + tuple("abcdefghijklmnopqrstuvwxyz") + tuple("{|}~")
    named_a = _words(
        "accept add alt altleft altright apps backspace browserback browserfavorites "
        "browserforward browserhome browserrefresh browsersearch browserstop capslock clear "
        "convert ctrl ctrlleft ctrlright decimal del delete divide down end enter esc escape "
        "execute"
    )
    function_keys = tuple(f"f{n}" for n in range(1, 25))
    named_b = _words(
        "final fn hanguel hangul hanja help home insert junja kana kanji launchapp1 launchapp2 "
        "launchmail launchmediaselect left modechange multiply nexttrack nonconvert"
    )
    numpad = tuple(f"num{n}" for n in range(10))
    named_c = _words(
        "numlock pagedown pageup pause pgdn pgup playpause prevtrack print printscreen prntscrn "
        "prtsc prtscr return right scrolllock select separator shift shiftleft shiftright sleep "
        "space stop subtract tab up volumedown volumemute volumeup win winleft winright yen "
        "command option optionleft optionright"
    )
    return punctuation + named_a + function_keys + named_b + numpad + named_c


#: Every key name pyautogui accepts, in pyautogui's order.
KEYBOARD_KEYS: Final[tuple[str, ...]] = _keyboard_keys()
_KEY_SET: Final = frozenset(KEYBOARD_KEYS)

#: The replies that are not actions on the screen but signals to the runner.
SPECIAL_WORDS: Final = ("WAIT", "FAIL", "DONE")


@attrs.frozen
class ParamSpec:
    """One parameter of an action: its kind, whether it is required, what it allows.

    `choices` limits a `choice` or `integer` parameter to those values;
    `screen_axis` limits a `number` to 0 .. the screen's width (`"x"`) or
    height (`"y"`), both ends included.
    """

    name: str
    kind: ParamKind
    required: bool
    choices: tuple[str | int, ...] = ()
    screen_axis: Literal["x", "y"] | None = None


@attrs.frozen
class ActionSpec:
    """One action type: its name, a one-line note on what it does, its parameters.

    Each tuple in `together` names parameters that must all be given or all
    be left out (the OSWorld controller rejects an x without a y).
    """

    name: str
    note: str
    params: tuple[ParamSpec, ...] = ()
    together: tuple[tuple[str, ...], ...] = ()

    def param(self, name: str) -> ParamSpec | None:
        """The parameter called `name`, or None when the action has none by that name."""
        return next((p for p in self.params if p.name == name), None)


def _x(required: bool) -> ParamSpec:
    return ParamSpec("x", "number", required, screen_axis="x")


def _y(required: bool) -> ParamSpec:
    return ParamSpec("y", "number", required, screen_axis="y")


_BUTTON = ParamSpec("button", "choice", False, choices=("left", "right", "middle"))
_KEY = ParamSpec("key", "key", True)
_XY = (("x", "y"),)

#: The thirteen screen actions, in the order the prompts list them.
ACTIONS: Final[tuple[ActionSpec, ...]] = (
    ActionSpec("MOVE_TO", "move the pointer to a point", (_x(True), _y(True))),
    ActionSpec(
        "CLICK",
        "click a mouse button; at the given point if x and y are present, else where the pointer is",
        (
            _BUTTON,
            _x(False),
            _y(False),
            ParamSpec("num_clicks", "integer", False, choices=(1, 2, 3)),
        ),
        _XY,
    ),
    ActionSpec("MOUSE_DOWN", "press a mouse button and keep it held", (_BUTTON,)),
    ActionSpec("MOUSE_UP", "let go of a held mouse button", (_BUTTON,)),
    ActionSpec(
        "RIGHT_CLICK",
        "right-click at the point, or where the pointer is",
        (_x(False), _y(False)),
        _XY,
    ),
    ActionSpec(
        "DOUBLE_CLICK",
        "double-click with the left button at the point, or where the pointer is",
        (_x(False), _y(False)),
        _XY,
    ),
    ActionSpec(
        "DRAG_TO", "hold the left button and drag the pointer to a point", (_x(True), _y(True))
    ),
    ActionSpec(
        "SCROLL",
        "turn the scroll wheel by whole steps: dy up (positive) or down (negative), dx right (positive) or left (negative)",
        (ParamSpec("dx", "integer", True), ParamSpec("dy", "integer", True)),
    ),
    ActionSpec("TYPING", "type a piece of text", (ParamSpec("text", "text", True),)),
    ActionSpec("PRESS", "press and release one key", (_KEY,)),
    ActionSpec("KEY_DOWN", "press one key and keep it held", (_KEY,)),
    ActionSpec("KEY_UP", "let go of a held key", (_KEY,)),
    ActionSpec(
        "HOTKEY",
        "press a key combination: hold the keys in order, then let them go",
        (ParamSpec("keys", "keys", True),),
    ),
)

#: WAIT, FAIL and DONE: signals with no parameters.
SPECIAL_ACTIONS: Final[tuple[ActionSpec, ...]] = (
    ActionSpec("WAIT", "nothing to do until the screen changes; pause before the next step"),
    ActionSpec("FAIL", "the task cannot be done; use it only when that is certain"),
    ActionSpec("DONE", "the task is finished"),
)

#: Every action type by name, the specials included.
ACTION_SPECS: Final[Mapping[str, ActionSpec]] = MappingProxyType(
    {spec.name: spec for spec in ACTIONS + SPECIAL_ACTIONS}
)

_KNOWN_TYPES: Final = ", ".join(ACTION_SPECS)


def _kind_of(value: object) -> str:
    return type(value).__name__


def _range_of(param: ParamSpec, screen_size: tuple[int, int]) -> tuple[int, int] | None:
    if param.screen_axis is None:
        return None
    return (0, screen_size[0] if param.screen_axis == "x" else screen_size[1])


def _check_value(param: ParamSpec, value: object, screen_size: tuple[int, int]) -> str | None:
    if param.kind in ("number", "integer"):
        allowed: tuple[type, ...] = (int, float) if param.kind == "number" else (int,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            what = "a number" if param.kind == "number" else "an integer"
            return f"expected {what}, got {_kind_of(value)} {excerpt(value, 60)}"
        assert isinstance(value, int | float)
        bounds = _range_of(param, screen_size)
        finite = not isinstance(value, float) or math.isfinite(value)
        if bounds is not None and not (finite and bounds[0] <= value <= bounds[1]):
            return f"{excerpt(value, 60)} is outside {bounds[0]}..{bounds[1]}"
        if not finite:
            return f"{excerpt(value, 60)} is not a finite number"
        if param.choices and value not in param.choices:
            return f"{excerpt(value, 60)} is not one of {', '.join(map(str, param.choices))}"
        return None
    if not isinstance(value, str) and param.kind != "keys":
        return f"expected a string, got {_kind_of(value)} {excerpt(value, 60)}"
    if param.kind == "choice" and value not in param.choices:
        return f"{excerpt(value, 60)} is not one of {', '.join(map(repr, param.choices))}"
    if param.kind == "key":
        return _check_key(value)
    if param.kind == "keys":
        if not isinstance(value, list | tuple) or not value:
            return f"expected a non-empty list of key names, got {excerpt(value, 60)}"
        for index, key in enumerate(value):
            problem = _check_key(key)
            if problem is not None:
                return f"[{index}]: {problem}"
    return None


def _check_key(key: object) -> str | None:
    if not isinstance(key, str):
        return f"expected a key name (a string), got {_kind_of(key)} {excerpt(key, 60)}"
    if key in _KEY_SET or key.lower() in _KEY_SET:
        return None
    return f"unknown key name {excerpt(key, 60)}"


def _check_params(
    spec: ActionSpec, action: Mapping[str, object], screen_size: tuple[int, int]
) -> str | None:
    for name in action:
        if name != "action_type" and spec.param(name) is None:
            takes = (
                f"{spec.name} takes {', '.join(p.name for p in spec.params)}"
                if spec.params
                else f"{spec.name} takes no parameters"
            )
            return f"{spec.name}.{excerpt(name, 60)}: unknown parameter; {takes}"
    for group in spec.together:
        present = [name for name in group if name in action]
        if present and len(present) != len(group):
            missing = next(name for name in group if name not in action)
            return f"{spec.name}.{missing}: missing; {' and '.join(group)} must be given together"
    for param in spec.params:
        if param.name not in action:
            if param.required:
                return f"{spec.name}.{param.name}: missing required parameter"
            continue
        problem = _check_value(param, action[param.name], screen_size)
        if problem is not None:
            sep = "" if problem.startswith("[") else ": "
            return f"{spec.name}.{param.name}{sep}{problem}"
    return None


def nested_parameters(action: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The parameters of an action in OSWorld's nested form `{"action_type": T, "parameters":
    {...}}` (exactly those two keys, the parameters an object), else None.

    The OSWorld controller runs that form as the flat `{"action_type": T, **parameters}`;
    this is the one definition of the shape (the env adapters flatten by it, and the
    coordinate frames map its `x` and `y`).

    >>> nested_parameters({"action_type": "CLICK", "parameters": {"x": 1, "y": 2}})
    {'x': 1, 'y': 2}
    >>> nested_parameters({"action_type": "CLICK", "x": 1, "y": 2}) is None
    True
    """
    params = action.get("parameters")
    if isinstance(params, Mapping) and set(action) == {"action_type", "parameters"}:
        return params
    return None


def validate_computer_13(
    action: object, *, screen_size: tuple[int, int] = DEFAULT_SCREEN_SIZE
) -> Result[Action | Mapping[str, Any], str]:
    """Check one computer_13 action against the vocabulary.

    Success carries the action itself; Failure a message naming the bad
    field. An action may be any mapping, such as the `FrozenAction`s an
    `AgentState` stores. Key names are matched like the OSWorld controller does (a name
    whose lower-case form is a pyautogui key is accepted).

    >>> validate_computer_13({"action_type": "CLICK", "x": 10, "y": 20})
    <Success: {'action_type': 'CLICK', 'x': 10, 'y': 20}>
    >>> validate_computer_13({"action_type": "MOVE_TO", "x": 10})
    <Failure: MOVE_TO.y: missing required parameter>
    >>> validate_computer_13("DONE")
    <Success: DONE>

    A `screen_size` that is not a pair of ints >= 1 is a `ConfigError` (the
    action is not to blame).
    """
    screen_size = check_size("screen_size", screen_size)
    if isinstance(action, str):
        if action in SPECIAL_WORDS:
            return Success(action)
        return Failure(
            f"action: a string action must be one of {', '.join(SPECIAL_WORDS)}; got {excerpt(action, 60)}"
        )
    if not isinstance(action, Mapping):
        return Failure(
            "action: expected a JSON object with an action_type, or one of "
            f"{', '.join(SPECIAL_WORDS)}; got {_kind_of(action)} {excerpt(action, 60)}"
        )
    if "action_type" not in action:
        return Failure("action_type: missing")
    kind = action["action_type"]
    if not isinstance(kind, str):
        return Failure(f"action_type: expected a string, got {_kind_of(kind)} {excerpt(kind, 60)}")
    spec = ACTION_SPECS.get(kind)
    if spec is None:
        return Failure(f"action_type: unknown action {excerpt(kind, 60)}; known: {_KNOWN_TYPES}")
    problem = _check_params(spec, action, screen_size)
    if problem is not None:
        return Failure(problem)
    return Success(action)


def _describe_param(param: ParamSpec, screen_size: tuple[int, int]) -> str:
    if param.kind == "number":
        bounds = _range_of(param, screen_size)
        what = "a number" if bounds is None else f"a number from {bounds[0]} to {bounds[1]}"
    elif param.kind == "integer":
        what = (
            f"an integer, one of {', '.join(map(str, param.choices))}"
            if param.choices
            else "an integer (negative allowed)"
        )
    elif param.kind == "text":
        what = "a string"
    elif param.kind == "choice":
        what = "one of " + ", ".join(json.dumps(c) for c in param.choices)
    elif param.kind == "key":
        what = "one key name from the key list below"
    else:
        what = "a non-empty list of key names from the key list below"
    need = "required" if param.required else "optional"
    return f"{param.name} ({need}): {what}"


def describe_actions(screen_size: tuple[int, int] = DEFAULT_SCREEN_SIZE) -> str:
    """The action space as prompt text: every action, its parameters, the key list.

    >>> "MOVE_TO" in describe_actions() and "0 to 1920" in describe_actions()
    True
    """
    lines: list[str] = []
    for spec in ACTIONS:
        lines.append(f"- {spec.name}: {spec.note}.")
        lines.extend(f"    {_describe_param(p, screen_size)}" for p in spec.params)
        lines.extend(
            f"    {' and '.join(group)} are given together or not at all" for group in spec.together
        )
        if not spec.params:
            lines.append("    no parameters")
    lines.append("Three special actions take no parameters:")
    lines.extend(f"- {spec.name}: {spec.note}." for spec in SPECIAL_ACTIONS)
    lines.append(
        "Key names, written as JSON strings: " + ", ".join(json.dumps(k) for k in KEYBOARD_KEYS)
    )
    return "\n".join(lines)
