"""Shared pieces of the facade tests: the reference defaults, small observation folders, one reply per action space."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from adapters.trajectories.replay import ReplayEnv
from tests.conftest import OBSERVATIONS, write_named

#: Small real observations (a few hundred nodes each), in the order a folder serves them.
SMALL: Final = ("mousepad_notes", "mousepad_file_menu", "xfce4_terminal_shell")

#: Every valid (observation type, action space) pair.
COMBINATIONS: Final = (
    ("screenshot", "pyautogui"),
    ("screenshot", "computer_13"),
    ("a11y_tree", "pyautogui"),
    ("a11y_tree", "computer_13"),
    ("screenshot_a11y_tree", "pyautogui"),
    ("screenshot_a11y_tree", "computer_13"),
    ("som", "pyautogui"),
)

FAKE_KEY: Final = "sk-facade-DO-NOT-LEAK-9f8e7d6c5b4a"

#: The reference PromptAgent's constructor parameters and their defaults, in its order.
REFERENCE_DEFAULTS: Final = {
    "platform": "ubuntu",
    "model": "gpt-4-vision-preview",
    "max_tokens": 1500,
    "top_p": 0.9,
    "temperature": 0.5,
    "action_space": "computer_13",
    "observation_type": "screenshot_a11y_tree",
    "max_trajectory_length": 3,
    "a11y_tree_max_tokens": 10000,
    # Current OSWorld runners also pass the desktop password (default unchanged).
    "client_password": "password",
}


def observation_folder(target: Path, names: tuple[str, ...] = SMALL) -> Path:
    """Copy real fixtures into `target` as `01_NAME.png/.xml`, `02_...`, so they sort in order."""
    target.mkdir(parents=True, exist_ok=True)
    for number, name in enumerate(names, start=1):
        for ext in (".png", ".xml"):
            shutil.copyfile(OBSERVATIONS / f"{name}{ext}", target / f"{number:02d}_{name}{ext}")
    return target


def load(name: str) -> dict[str, object]:
    """The OSWorld observation dict of one fixture."""
    return {
        "screenshot": (OBSERVATIONS / f"{name}.png").read_bytes(),
        "accessibility_tree": (OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8"),
    }


def click_reply(action_space: str, observation_type: str, x: int = 19, y: int = 31) -> str:
    """A reply with one click, written the way each action space expects."""
    if action_space == "computer_13":
        return f'Clicking.\n```json\n{{"action_type": "CLICK", "x": {x}, "y": {y}}}\n```'
    if observation_type == "som":
        return "Clicking the first mark.\n```python\npyautogui.click(*tag_1)\n```"
    return f"Clicking.\n```python\npyautogui.click({x}, {y})\n```"


def expected_click(action_space: str, observation_type: str, x: int = 19, y: int = 31) -> object:
    """What `click_reply` parses to, for checks that do not depend on the set-of-marks numbers."""
    if action_space == "computer_13":
        return {"action_type": "CLICK", "x": x, "y": y}
    if observation_type == "som":
        return None
    return f"pyautogui.click({x}, {y})"


def write_task_list(
    root: Path, ids: Mapping[str, Sequence[str]], meta_name: str = "meta.json"
) -> tuple[Path, Path]:
    """An OSWorld task list under `root`: the meta file and its examples directory, each
    example asking `Do {id}` with no setup steps."""
    examples = root / "examples"
    for domain, example_ids in ids.items():
        (examples / domain).mkdir(parents=True, exist_ok=True)
        for example_id in example_ids:
            config = {"id": example_id, "instruction": f"Do {example_id}", "config": []}
            write_named(examples / domain, f"{example_id}.json", json.dumps(config).encode())
    meta = root / meta_name
    meta.write_text(json.dumps(dict(ids)), encoding="utf-8")
    return meta, examples


class Killed(BaseException):
    """Stands in for a kill: not an Exception, so nothing on the way catches it."""


class KillingEnv(ReplayEnv):
    """A replayed desktop that raises `Killed` instead of executing action number `kill_at`."""

    def __init__(self, directory: Path, kill_at: int | None) -> None:
        super().__init__(directory)
        self.kill_at = kill_at

    def step(self, action: Any, pause: float = 0) -> Any:
        if self.kill_at is not None and len(self.actions) + 1 == self.kill_at:
            raise Killed
        return super().step(action, pause)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its relative name, with its bytes."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
