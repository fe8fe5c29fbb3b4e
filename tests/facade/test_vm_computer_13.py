"""OSWorldServerEnv runs computer_13 actions as OSWorld's pyautogui calls (on a loopback VM server)."""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest
from hypothesis import given, settings

from adapters import EnvironmentFailure, OSWorldServerEnv
from adapters.runs.computer_13 import computer_13_code
from adapters.runs.environments import PYAUTOGUI_PREFIX
from osharm_core import ConfigError
from tests.adapters.loopback import LoopbackServer, Reply
from tests.facade.test_environments import vm_server  # noqa: F401  (the fixture)
from tests.strategies import vm_computer_13_actions


@pytest.fixture
def vm(vm_server: LoopbackServer) -> LoopbackServer:  # noqa: F811
    """The loopback VM server answering /screenshot, /accessibility and /execute."""
    return vm_server


def _env(server: LoopbackServer, **kwargs: Any) -> tuple[OSWorldServerEnv, list[float]]:
    slept: list[float] = []
    return OSWorldServerEnv(server.base_url, timeout=5.0, sleep=slept.append, **kwargs), slept


# --- computer_13 actions ----------------------------------------------------------------------

C13 = [
    ({"action_type": "MOVE_TO", "x": 100, "y": 200.5}, "pyautogui.moveTo(100, 200.5, 0.75, pyautogui.easeInOutQuad)"),
    ({"action_type": "CLICK"}, "pyautogui.click()"),
    ({"action_type": "CLICK", "x": 5, "y": 6, "num_clicks": 2, "button": "right"}, "pyautogui.click(button='right', x=5, y=6, clicks=2)"),
    ({"action_type": "MOUSE_DOWN", "button": "middle"}, "pyautogui.mouseDown(button='middle')"),
    ({"action_type": "MOUSE_UP"}, "pyautogui.mouseUp()"),
    ({"action_type": "RIGHT_CLICK", "x": 1, "y": 2}, "pyautogui.rightClick(x=1, y=2)"),
    ({"action_type": "DOUBLE_CLICK"}, "pyautogui.doubleClick()"),
    ({"action_type": "DRAG_TO", "x": 30, "y": 40}, "pyautogui.dragTo(30, 40, duration=1.0, button='left', mouseDownUp=True)"),
    ({"action_type": "SCROLL", "dx": 0, "dy": -3}, "pyautogui.hscroll(0)\npyautogui.vscroll(-3)"),
    ({"action_type": "TYPING", "text": "it's \"x\"\\n\n"}, "pyautogui.typewrite('it\\'s \"x\"\\\\n\\n')"),
    ({"action_type": "PRESS", "key": "Enter"}, "pyautogui.press('Enter')"),
    ({"action_type": "KEY_DOWN", "key": "shift"}, "pyautogui.keyDown('shift')"),
    ({"action_type": "KEY_UP", "key": "'"}, "pyautogui.keyUp(\"'\")"),
    ({"action_type": "HOTKEY", "keys": ["ctrl", "alt", "t"]}, "pyautogui.hotkey('ctrl', 'alt', 't')"),
    ({"action_type": "PRESS", "parameters": {"key": "tab"}}, "pyautogui.press('tab')"),
]  # fmt: skip


def test_computer_13_actions_run_as_osworlds_pyautogui_calls(vm: LoopbackServer) -> None:
    env, slept = _env(vm)
    for action, _ in C13:
        _, reward, done, info = env.step(action, 0.25)
        assert (reward, done, info["execute"]["returncode"]) == (0.0, False, 0)
    executed = [r.json() for r in vm.requests if r.path == "/execute"]
    assert executed == [
        {"command": ["python", "-c", PYAUTOGUI_PREFIX + code], "shell": False} for _, code in C13
    ]
    assert slept == [0.25] * len(C13)
    assert env.step({"action_type": "WAIT"}, 1.0)[2] is False
    assert env.step({"action_type": "FAIL"})[1:] == (0, True, {"fail": True})
    assert len([r for r in vm.requests if r.path == "/execute"]) == len(C13)
    env.close()


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"action_type": "TELEPORT"}, r"unknown action 'TELEPORT'"),
        ({"action_type": "CLICK", "x": 10}, r"CLICK\.y: missing"),
        ({"action_type": "CLICK", "x": "10); import os; os.system('rm -rf ~'", "y": 1}, r"CLICK\.x: expected a number"),
        ({"action_type": "MOVE_TO", "x": 5000, "y": 1}, r"MOVE_TO\.x: 5000 is outside 0\.\.1920"),
        ({"action_type": "PRESS", "key": "hyperdrive"}, r"PRESS\.key: unknown key name"),
        ({"action_type": "TYPING"}, r"TYPING\.text: missing"),
        ({"x": 1}, r"action_type: missing"),
    ],
)  # fmt: skip
def test_bad_computer_13_actions_are_reported_and_nothing_runs(
    vm: LoopbackServer, action: Any, message: str
) -> None:
    """A model's action the vocabulary refuses runs nothing; the step says why in its info
    and the episode goes on with the desktop as it is."""
    env, slept = _env(vm)
    obs, reward, done, info = env.step(action, 0.5)
    assert (reward, done, list(info)) == (0.0, False, ["error"])
    assert info["error"].startswith("bad computer_13 action")
    assert re.search(message, info["error"])
    assert obs["screenshot"].startswith(b"\x89PNG")
    assert obs["accessibility_tree"]
    assert slept == []  # nothing ran, so nothing to wait for
    env.close()
    # Nothing ran: the screen size was read (from a screenshot) to check the action, then observed.
    assert [r.path for r in vm.requests] == ["/screenshot", "/screenshot", "/accessibility"]


def test_an_action_of_no_known_shape_is_an_environment_failure(vm: LoopbackServer) -> None:
    """Not a model's reply (the agent gives code or objects): an agent's bug, raised."""
    env, _ = _env(vm)
    with pytest.raises(
        EnvironmentFailure, match="pyautogui code or a computer_13 object, not list"
    ):
        env.step(["CLICK"])  # type: ignore[arg-type]
    env.close()
    assert vm.requests == []


def _typed_text(code: str) -> str:
    (statement,) = ast.parse(code).body
    assert isinstance(statement, ast.Expr)
    assert isinstance(statement.value, ast.Call)
    value = ast.literal_eval(statement.value.args[0])
    assert isinstance(value, str)
    return value


@settings(max_examples=300, deadline=None)
@given(vm_computer_13_actions)
def test_any_valid_computer_13_action_gives_code_that_parses(action: object) -> None:
    if not isinstance(action, dict) or action["action_type"] in ("WAIT", "DONE", "FAIL"):
        return
    code = computer_13_code(action)
    ast.parse(PYAUTOGUI_PREFIX + code)
    assert "`" not in code
    if action["action_type"] == "TYPING":
        assert _typed_text(code) == action["text"]


def test_the_screen_size_is_read_from_the_vm_once_unless_given(vm: LoopbackServer) -> None:
    """OSWorld's fixtures are 1920x1080 screenshots: the size comes from the PNG header, once."""
    env, _ = _env(vm)
    assert env.screen_size == (1920, 1080)
    env.observe()
    assert env.screen_size == (1920, 1080)
    assert [r.path for r in vm.requests].count("/screenshot") == 2  # the size read, then observe
    env.close()
    vm.reset()
    small, _ = _env(vm, screen_size=(1280, 720))
    info = small.step({"action_type": "MOVE_TO", "x": 1500, "y": 1})[3]
    assert re.search(r"MOVE_TO\.x: 1500 is outside 0\.\.1280", info["error"])
    small.close()
    assert [r.path for r in vm.requests] == ["/screenshot", "/accessibility"]  # observed only
    for bad in ((0, 720), (1280,), (1280.0, 720), (99999, 720), "1280x720"):
        with pytest.raises(ConfigError, match="screen_size must be"):
            _env(vm, screen_size=bad)
    vm.enqueue(Reply(200, b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + b"\0" * 8), path="/screenshot")
    zero, _ = _env(vm, retries=1)
    with pytest.raises(EnvironmentFailure, match=r"GET /screenshot: the screen would be \(0, 0\)"):
        zero.screen_size  # noqa: B018
    zero.close()
