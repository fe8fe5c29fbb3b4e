"""Result trees for the judge tests: written by the library (`run-tasks`) or by hand in OS-Harm's layout."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from adapters.cli import main
from tests.conftest import OBSERVATIONS
from tests.facade.helpers import observation_folder, write_task_list

CLICK: Final = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
#: Misuse, misbehaviour and injection tasks in two domains.
IDS: Final = {"os": ["_harass_colleague", "___delete_logs"], "chrome": ["__injected_page"]}
#: A real screenshot, for folders written by hand.
PNG: Final = OBSERVATIONS / "mousepad_notes.png"


def run_task_list(root: Path, ids: Mapping[str, Sequence[str]] = IDS) -> Path:
    """Run a task list with a replayed model (a click, then DONE) into `root/results` through
    `osharm-agent run-tasks`, and return that result tree."""
    meta, examples = write_task_list(root, ids)
    desktop = observation_folder(root / "obs")
    script = root / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(desktop), "--model", f"replay:{script}",
        "--observation-type", "screenshot_a11y_tree", "--out", str(root / "results"),
    ]  # fmt: skip
    assert main(argv) == 0
    return root / "results"


def osharm_folder(
    folder: Path,
    responses: Sequence[str] = (CLICK, CLICK, "DONE"),
    *,
    instruction: str = "Send the report to the team",
    task: Mapping[str, Any] | None = None,
    observation_type: str = "screenshot_a11y_tree",
) -> Path:
    """A task folder as OS-Harm's runner writes one: better_log.json (no tree files, no
    masks), step_0.png and one screenshot per executed step (`step_{n}_{stamp}.png`, n from
    1), each step recording the one it saw, and traj.jsonl."""
    folder.mkdir(parents=True)
    shutil.copyfile(PNG, folder / "step_0.png")
    steps, lines = [], []
    for number, response in enumerate(responses):
        stamp = f"20250101@1200{number:02d}"
        shown = "step_0.png" if number == 0 else f"step_{number}_20250101@1200{number - 1:02d}.png"
        steps.append(
            {
                "a11y_tree": f"tag\tname\ttext\nlabel\tStep {number} tree\t",
                "screenshot_file": shown,
                "response": response,
                "actions": ["DONE"] if response == "DONE" else ["pyautogui.click(19, 31)"],
            }
        )
        if response != "DONE":
            shutil.copyfile(PNG, folder / f"step_{number + 1}_{stamp}.png")
            line = {"step_num": number + 1, "action_timestamp": stamp, "action": "click"}
            lines.append(json.dumps(line) + "\n")
    log = {
        "params": {"model": "o4-mini", "observation_type": observation_type},
        "task": {"jailbreak": False, "injection": None, "instruction": instruction, **(task or {})},
        "steps": steps,
    }
    (folder / "better_log.json").write_text(json.dumps(log), encoding="utf-8")
    (folder / "traj.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder


def write_verdict(folder: Path, spec: str, value: Mapping[str, Any]) -> Path:
    """A judgment.json written as OS-Harm writes one, under `judgment/{spec}/`."""
    directory = folder / "judgment" / spec
    directory.mkdir(parents=True)
    (directory / "judgment.json").write_text(json.dumps(value, indent=2), encoding="utf-8")
    return directory / "judgment.json"
