"""computer_13 actions as the pyautogui code an OSWorld VM server runs.

`computer_13_code` checks an action against the vocabulary
(`osharm_core.validate_computer_13`) and writes the pyautogui calls OSWorld's
`PythonController.execute_action` sends to `POST /execute` for it:

- CLICK passes only the parameters given, as keywords in the order
  button, x, y, clicks (`num_clicks`); MOUSE_DOWN / MOUSE_UP pass `button`
  when given; RIGHT_CLICK and DOUBLE_CLICK pass `x` and `y` when given.
- DRAG_TO drags with the left button over one second (`mouseDownUp=True`).
- SCROLL turns the horizontal wheel by `dx`, then the vertical one by `dy`
  (OSWorld sends them as two commands; here they are two lines of one).
- TYPING is `typewrite` of the text; PRESS / KEY_DOWN / KEY_UP / HOTKEY pass
  the key names as given (pyautogui lower-cases names longer than one character).
- MOVE_TO: OSWorld draws the duration (0.5-1 s) and the easing at random;
  here it is always 0.75 s with `easeInOutQuad`, so a run is repeatable.

Every string goes into the code as a Python literal (`literal`), so text with
quotes, backslashes or newlines types exactly what it says and can never end
the call it sits in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from returns.pipeline import is_successful

from adapters.errors import EnvironmentFailure
from adapters.providers.computer_use import literal
from osharm_core.errors import excerpt
from osharm_core.state import thaw
from osharm_core.vocabulary import (
    DEFAULT_SCREEN_SIZE,
    SPECIAL_WORDS,
    nested_parameters,
    validate_computer_13,
)

#: How MOVE_TO glides to its point (OSWorld picks these at random each time).
MOVE_DURATION: Final = 0.75
MOVE_TWEEN: Final = "pyautogui.easeInOutQuad"


def _flatten(action: Mapping[str, Any]) -> dict[str, Any]:
    """OSWorld also takes `{"action_type": T, "parameters": {...}}` (`nested_parameters`); make it
    the flat form."""
    plain: dict[str, Any] = thaw(action)
    params = nested_parameters(plain)
    if params is not None:
        return {"action_type": plain["action_type"], **params}
    return plain


def action_word(action: str | Mapping[str, Any]) -> str | None:
    """WAIT, DONE or FAIL when `action` is that word or `{"action_type": word}`, else None."""
    kind = action if isinstance(action, str) else action.get("action_type")
    return kind if kind in SPECIAL_WORDS else None


def _num(value: Any) -> str:
    return repr(value)


def _keywords(action: Mapping[str, Any], names: tuple[tuple[str, str], ...]) -> str:
    parts = []
    for field, keyword in names:
        if field in action:
            value = action[field]
            parts.append(f"{keyword}={literal(value) if isinstance(value, str) else _num(value)}")
    return ", ".join(parts)


def _code(action: Mapping[str, Any]) -> str:
    kind = action["action_type"]
    match kind:
        case "MOVE_TO":
            x, y = _num(action["x"]), _num(action["y"])
            return f"pyautogui.moveTo({x}, {y}, {MOVE_DURATION}, {MOVE_TWEEN})"
        case "CLICK":
            names = (("button", "button"), ("x", "x"), ("y", "y"), ("num_clicks", "clicks"))
            return f"pyautogui.click({_keywords(action, names)})"
        case "MOUSE_DOWN" | "MOUSE_UP":
            name = "mouseDown" if kind == "MOUSE_DOWN" else "mouseUp"
            return f"pyautogui.{name}({_keywords(action, (('button', 'button'),))})"
        case "RIGHT_CLICK" | "DOUBLE_CLICK":
            name = "rightClick" if kind == "RIGHT_CLICK" else "doubleClick"
            return f"pyautogui.{name}({_keywords(action, (('x', 'x'), ('y', 'y')))})"
        case "DRAG_TO":
            x, y = _num(action["x"]), _num(action["y"])
            return f"pyautogui.dragTo({x}, {y}, duration=1.0, button='left', mouseDownUp=True)"
        case "SCROLL":
            dx, dy = _num(action["dx"]), _num(action["dy"])
            return f"pyautogui.hscroll({dx})\npyautogui.vscroll({dy})"
        case "TYPING":
            return f"pyautogui.typewrite({literal(action['text'])})"
        case "PRESS":
            return f"pyautogui.press({literal(action['key'])})"
        case "KEY_DOWN":
            return f"pyautogui.keyDown({literal(action['key'])})"
        case "KEY_UP":
            return f"pyautogui.keyUp({literal(action['key'])})"
        case _:  # HOTKEY: validation admits nothing else here
            return f"pyautogui.hotkey({', '.join(literal(k) for k in action['keys'])})"


def computer_13_code(
    action: Mapping[str, Any], *, screen_size: tuple[int, int] = DEFAULT_SCREEN_SIZE
) -> str:
    """The pyautogui code (lines joined by newlines) for one computer_13 screen action.

    WAIT / DONE / FAIL run no code (see `action_word`); an action the
    vocabulary refuses (unknown type, a missing, extra or ill-typed parameter,
    a point off the `screen_size` screen) is an `EnvironmentFailure` naming it.

    >>> computer_13_code({"action_type": "CLICK", "x": 10, "y": 20, "button": "left"})
    "pyautogui.click(button='left', x=10, y=20)"
    >>> print(computer_13_code({"action_type": "HOTKEY", "keys": ["ctrl", "c"]}))
    pyautogui.hotkey('ctrl', 'c')
    """
    plain = _flatten(action)
    if action_word(plain) is not None:
        raise EnvironmentFailure(f"{plain['action_type']} runs no code")
    checked = validate_computer_13(plain, screen_size=screen_size)
    if not is_successful(checked):
        quoted = excerpt(plain, 120)
        raise EnvironmentFailure(f"bad computer_13 action {quoted}: {checked.failure()}")
    return _code(plain)


__all__ = ["MOVE_DURATION", "MOVE_TWEEN", "action_word", "computer_13_code"]
