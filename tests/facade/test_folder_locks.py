"""One live run per task folder: a second run leaves a held folder alone, a dead run's lock is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from adapters.runs.locks import STALE_AFTER, FolderLock, Holder, take_lock
from adapters.trajectories.result_folders import LOCK_FILE
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.conftest import CLI_CHILD, child_environment
from tests.facade.helpers import observation_folder, write_task_list

ROOT = Path(__file__).resolve().parents[2]
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def _dead_pid() -> int:
    """The id of a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _write_lock(folder: Path, host: str, pid: int, age: float = 0.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    holder = {"host": host, "pid": pid, "run": "theirs", "since": "2026-11-28T00:00:00+00:00"}
    path.write_text(json.dumps(holder), encoding="utf-8")
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_folder_is_held_by_one_run_and_given_back(tmp_path: Path) -> None:
    """The first run takes the lock; a second finds it held (naming the holder); once released,
    the next run takes it."""
    first = take_lock(tmp_path / "task", "one")
    assert isinstance(first, FolderLock)
    second = take_lock(tmp_path / "task", "two")
    assert isinstance(second, Holder)
    assert (second.host, second.pid, second.run) == (socket.gethostname(), os.getpid(), "one")
    first.release()
    assert not (tmp_path / "task" / LOCK_FILE).exists()
    assert isinstance(take_lock(tmp_path / "task", "three"), FolderLock)


def test_a_lock_whose_process_has_ended_is_taken_over(tmp_path: Path) -> None:
    """A run killed mid-task leaves its lock: on this host, a holder whose process is gone is
    no holder, and the next run takes the folder."""
    _write_lock(tmp_path / "task", socket.gethostname(), _dead_pid())
    lock = take_lock(tmp_path / "task", "mine")
    assert isinstance(lock, FolderLock)
    assert json.loads((tmp_path / "task" / LOCK_FILE).read_text(encoding="utf-8"))["run"] == "mine"
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == [LOCK_FILE]


def test_another_hosts_lock_holds_until_it_goes_unrefreshed(tmp_path: Path) -> None:
    """A lock from another host (a cluster sharing --out) cannot be checked by process id: it
    holds while it is refreshed, and is stale once it has not been for STALE_AFTER seconds."""
    _write_lock(tmp_path / "fresh", "another-node", 1)
    assert isinstance(take_lock(tmp_path / "fresh", "mine"), Holder)
    _write_lock(tmp_path / "old", "another-node", 1, age=STALE_AFTER + 60)
    assert isinstance(take_lock(tmp_path / "old", "mine"), FolderLock)


def test_a_lock_file_that_is_not_a_lock_is_judged_by_its_age(tmp_path: Path) -> None:
    """A torn or hostile lock file (not JSON, a link, huge) names no holder: held while
    fresh, taken over once old; nothing crashes and no link is followed."""
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / LOCK_FILE).write_bytes(b"\x00not json" * 10_000)
    held = take_lock(folder, "mine")
    assert isinstance(held, Holder)
    assert held.host == "unknown"
    old = time.time() - STALE_AFTER - 60
    os.utime(folder / LOCK_FILE, (old, old))
    assert isinstance(take_lock(folder, "mine"), FolderLock)


def test_a_second_run_on_one_out_leaves_the_held_task_alone(tmp_path: Path) -> None:
    """Two real `run-tasks` processes on one --out: the second, started while the first is
    mid-task, skips that task with a line naming its holder, pays for nothing and writes
    nothing there; the folder ends with the first run's one episode."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    desktop = observation_folder(tmp_path / "obs")
    with LoopbackServer() as server:
        server.enqueue(Reply(200, chat_completion(CLICK), delay=3.0))
        server.enqueue(Reply(200, chat_completion("DONE")))
        argv = [
            *CLI_CHILD, "run-tasks", "--tasks", str(meta), "--examples", str(examples),
            "--observations", str(desktop), "--model", "compat/m",
            "--base-url", server.base_url + "/v1", "--out", str(tmp_path / "out"),
        ]  # fmt: skip
        env = child_environment()
        first = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        server.wait_for_requests(1)
        second = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
        )
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert "[os/_a] skipped: held by another run (host " in second.stdout
    assert "1 held by another run" in second.stdout
    assert len(server.requests) == 2  # the first run's two steps, nothing from the second
    folder = next((tmp_path / "out").rglob("_a"))
    lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step_num"] for line in lines] == [1, 2]
    assert (folder / "unscored.txt").is_file()
    assert not (folder / LOCK_FILE).exists()
