"""The README's Python examples run as written, and its quick start names real things."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _python_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if current is None and line == "```python":
            current = []
        elif current is not None and line == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The 'own loop' example runs from the repository root and prints the parsed action."""
    block = next(b for b in _python_blocks(README) if "prepare_step" in b)
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        exec(compile(block, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert capsys.readouterr().out.strip() == "['pyautogui.click(19, 31)']"


def test_quick_start_paths_exist() -> None:
    """The quick start's example task and recorded trajectory are in the repository."""
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Quick start"
    assert (ROOT / "examples/task/trajectory.jsonl").is_file()
    assert (ROOT / "examples/task/task.json").is_file()
