"""`osharm-agent run --tasks --workers` killed with SIGKILL mid-run, then run again.

A real process, a real kill: nothing in the runner gets to clean up. The rerun
must skip every task the killed run finished (its folder untouched), redo every
other one from the start, and leave each folder whole: no task lost, none run
twice, no step recorded twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from adapters.cli import main
from adapters.runs.tasks import is_finished
from adapters.trajectories.osharm import BETTER_LOG, TRAJ_FILE
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion
from tests.conftest import CLI_CHILD
from tests.facade.helpers import observation_folder, write_task_list

CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
IDS = {"os": [f"task_{i:02d}" for i in range(8)], "chrome": [f"task_{i:02d}" for i in range(8, 12)]}
WORKERS = 4
STEPS = 3
#: Model calls answered at once before the server stalls every further one until released.
FAST_CALLS = 10


class _StallingModel:
    """Answers the first `FAST_CALLS` calls, then holds each call until `release` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self, received: Received) -> Reply:
        with self.lock:
            self.calls += 1
            number = self.calls
        if number > FAST_CALLS:
            self.release.wait(timeout=60)
        return Reply(200, chat_completion(CLICK))

    def stalled(self) -> int:
        with self.lock:
            return max(0, self.calls - FAST_CALLS)


def _folders(out: Path) -> dict[str, Path]:
    return {f"{p.parent.name}/{p.name}": p for p in out.glob("*/*/*/*/*") if p.is_dir()}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_sigkilled_run_resumes_without_losing_or_repeating_a_task(tmp_path: Path) -> None:
    meta, examples = write_task_list(tmp_path, IDS)
    desktop = observation_folder(tmp_path / "desktop")
    out = tmp_path / "results"
    model = _StallingModel()
    argv = [
        "run-tasks",
        "--tasks", str(meta),
        "--examples", str(examples),
        "--observations", str(desktop),
        "--workers", str(WORKERS),
        "--max-steps", str(STEPS),
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(out),
        "--api-key-env", "OSHARM_TEST_KEY",
    ]  # fmt: skip
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", model)
        model_args = ["--model", "compat/kill-test", "--base-url", f"{server.base_url}/v1"]
        process = subprocess.Popen(
            [*CLI_CHILD, *argv, *model_args],
            env={**os.environ, "OSHARM_TEST_KEY": "key"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while model.stalled() < WORKERS and process.poll() is None:
                assert time.monotonic() < deadline, "the run never had every worker waiting"
                time.sleep(0.01)
            # Every worker is inside a model call: kill the run without warning.
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            model.release.set()
        assert process.returncode == -signal.SIGKILL

        before = _folders(out)
        finished = {k for k, p in before.items() if is_finished(p)}
        unfinished = set(before) - finished
        assert unfinished, "killed while workers were mid-episode, so some folder is unfinished"
        kept = {k: _snapshot(before[k]) for k in finished}

        os.environ["OSHARM_TEST_KEY"] = "key"
        try:
            assert main(argv + model_args) == 0
        finally:
            del os.environ["OSHARM_TEST_KEY"]

    after = _folders(out)
    assert set(after) == {f"{d}/{i}" for d, ids in IDS.items() for i in ids}
    for key, folder in after.items():
        assert is_finished(folder), f"{key} was lost"
        lines = [
            json.loads(x) for x in (folder / TRAJ_FILE).read_text(encoding="utf-8").splitlines()
        ]
        assert [x["step_num"] for x in lines] == list(range(1, STEPS + 1)), key
        assert (
            len(json.loads((folder / BETTER_LOG).read_text(encoding="utf-8"))["steps"]) == STEPS
        ), key
        assert not list(folder.glob("*.tmp")), key
    # Finished tasks were not run again: their folders are byte for byte what the kill left.
    for key, files in kept.items():
        assert _snapshot(after[key]) == files, f"{key} was run twice"
