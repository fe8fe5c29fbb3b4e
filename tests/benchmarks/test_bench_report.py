"""The report at scale: 150 OS-Harm task folders of 15 steps, real 1920x1080 screenshots.

Built synthetically (the screenshots hard-linked from the fixtures, so the tree costs no disk),
with a judgment per task, safety events on some steps and a run manifest holding each task's
usage. Printed: the time `build_report` takes, the bytes the report's own files take (pages
and thumbnails; the screenshots it links to are not counted), the largest page, and the time
headless Chromium takes to load the index and a 15-step task page (its `load` event, best of
three). Targets (the issue's): the report opens in a couple of seconds and stays a few
megabytes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from adapters.report import build_report
from tests.benchmarks.timing import SLACK
from tests.conftest import OBSERVATIONS
from tests.report.browser import chromium, offline_page
from tests.report.trees import reply, result_folder

TASKS = 150
STEPS = 15
#: The issue's targets: a report of a few megabytes, opening in a couple of seconds. Its size
#: is mostly the replies themselves (here 2,250 of some 800 characters) with ~1.2 kB of
#: markup each; the screenshots it links to take ~100 times as much.
MAX_BYTES = 8_000_000
MAX_OPEN_SECONDS = 2.0
SCREENS = sorted(OBSERVATIONS.glob("*.png"))
WORDS = (
    "The window shows the form; the field I need is in the second row, so I click it, type "
    "the value and move on to the next one, checking the tree's positions first. "
) * 4


def _steps(task: int) -> list[dict[str, Any]]:
    steps = []
    for n in range(STEPS):
        code = (
            f"import pyautogui\nimport time\npyautogui.click({100 + 37 * n}, {200 + 29 * task % 600})\n"
            f"time.sleep(0.5)\npyautogui.typewrite('value {task}-{n}')\npyautogui.press('tab')"
        )
        step: dict[str, Any] = {"response": reply(code, WORDS), "actions": [code]}
        if n % 5 == 4:
            step["safety_events"] = [
                {"kind": "flag", "step": n + 1, "source": "monitor", "code": "injection",
                 "message": "the page asks for a key"}
            ]  # fmt: skip
        steps.append(step)
    return steps


def _tree(root: Path) -> Path:
    outcomes = []
    for task in range(TASKS):
        judgment = {"reasoning": WORDS, "success": task % 3 == 0, "safety": task % 4 != 0,
                    "violation_step": 7 if task % 4 == 0 else None}  # fmt: skip
        folder = result_folder(
            root, f"domain{task % 6}", f"task{task:03d}", _steps(task),
            image=SCREENS[task % len(SCREENS)], link=True, judgment=judgment,
            result=str(float(task % 2)),
        )  # fmt: skip
        outcomes.append({"folder": folder.relative_to(root).as_posix(), "status": "finished",
                         "input_tokens": 150_000, "output_tokens": 4_000, "cost_usd": 0.41,
                         "seconds": 95.0})  # fmt: skip
    manifest = {"manifest_version": 1, "model": "gpt-4o", "outcomes": outcomes}
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def _load_seconds(page: Any, url: str) -> float:
    best = float("inf")
    for _ in range(3):
        page.goto(url)
        page.wait_for_load_state("load")
        took = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        best = min(best, took / 1000)
    return best


def test_a_report_of_150_tasks_of_15_steps(tmp_path: Path) -> None:
    """150 x 15 steps: the report is a few megabytes and opens in a couple of seconds."""
    root = _tree(tmp_path / "results")
    started = time.perf_counter()
    summary = build_report(root, tmp_path / "report")
    built = time.perf_counter() - started
    assert (summary.tasks, summary.steps, summary.thumbnails) == (TASKS, TASKS * STEPS, TASKS)
    out = summary.out
    index = (out / "index.html").stat().st_size
    pages = [p.stat().st_size for p in (out / "tasks").iterdir()]
    thumbs = sum(p.stat().st_size for p in (out / "thumbs").iterdir())
    requests: list[str] = []
    with chromium() as browser:
        page = offline_page(browser, requests)
        index_open = _load_seconds(page, (out / "index.html").as_uri())
        task_open = _load_seconds(page, (out / "tasks" / "0001.html").as_uri())
        rows = page.goto((out / "index.html").as_uri()) and page.eval_on_selector_all(
            "#tasks tbody tr", "rows => rows.length"
        )
    assert requests == []
    assert rows == TASKS
    print(
        f"\nreport of {TASKS} tasks x {STEPS} steps: built in {built:.1f} s; "
        f"{summary.bytes / 1e6:.2f} MB of its own files (index {index / 1e3:.0f} kB, "
        f"task pages {sum(pages) / 1e6:.2f} MB, largest {max(pages) / 1e3:.0f} kB, "
        f"thumbnails {thumbs / 1e6:.2f} MB); opens in Chromium: index {index_open * 1e3:.0f} ms, "
        f"a {STEPS}-step task page {task_open * 1e3:.0f} ms "
        f"(bounds: <= {MAX_BYTES / 1e6:.0f} MB, <= {MAX_OPEN_SECONDS:.0f} s)"
    )
    assert summary.bytes <= MAX_BYTES
    assert index_open <= MAX_OPEN_SECONDS * SLACK
    assert task_open <= MAX_OPEN_SECONDS * SLACK
