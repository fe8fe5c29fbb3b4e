"""One step of `osharm-agent run TASK_DIR --format osharm` walks the natural path.

The path: the CLI's runner, the episode loop, the agent, the core's `prepare_step` and
`complete_step`, the model client (encode, HTTP, decode), the recorder and the environment.
A step is traced from the loop asking the agent for it to the loop asking for the next
one (its actions executed and recorded on the way, threads included), and every module
of the library whose code runs is listed. The pure core counts once: its two step
functions are its door, and how it is organised inside is its own business; so does the
model client (`adapters/engine`, `adapters/providers` and the wire helpers of
`adapters/_wire.py`, behind `ModelClient.complete`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import adapters.runs.episode as episode
from adapters.cli import main
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"
CLICK = "Clicking the File menu.\n```python\npyautogui.click(19, 31)\n```"
#: The most modules one step may touch (the redesign issue's target; 35 before it).
MOST_MODULES = 15
#: What counts as one: the pure core, and the model client (its engine, its providers, and
#: the wire helpers it quotes, redacts and names requests with).
ONE_ROOM = {
    "osharm_core": "osharm_core",
    "engine": "model client",
    "providers": "model client",
    "_wire.py": "model client",
}


def _unit(path: str) -> str | None:
    """The module (or room) a file of the library is, `None` for any other file."""
    relative = os.path.relpath(path, ROOT)
    parts = relative.split(os.sep)
    if parts[0] == "osharm_core":
        return ONE_ROOM["osharm_core"]
    if parts[0] != "adapters":
        return None
    return ONE_ROOM.get(parts[1], relative)


class _Trace:
    """The modules each step enters: a step's set begins when the loop asks for it."""

    def __init__(self) -> None:
        self.steps: list[set[str]] = []

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and self.steps:
            unit = _unit(frame.f_code.co_filename)
            if unit is not None:
                self.steps[-1].add(unit)


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Trace]:
    """Traces the run's calls in every thread, a new set per model step."""
    traced = _Trace()
    ask = episode._Turns.step

    async def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        traced.steps.append(set())
        return await ask(self, *args, **kwargs)

    monkeypatch.setattr(episode._Turns, "step", step)
    before = sys.getprofile(), threading.getprofile()
    sys.setprofile(traced.profile)
    threading.setprofile(traced.profile)
    try:
        yield traced
    finally:
        sys.setprofile(before[0])
        threading.setprofile(before[1])


def _first_step(traced: _Trace) -> list[str]:
    assert len(traced.steps) >= 2
    return sorted(traced.steps[0])


def test_a_replayed_step_walks_the_natural_path(trace: _Trace, tmp_path: Path) -> None:
    """The quick start's run (a recorded model, result folders) touches at most 15 modules."""
    model = f"replay:{EXAMPLE / 'trajectory.jsonl'}"
    argv = ["run", str(EXAMPLE), "--model", model, "--format", "osharm"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    touched = _first_step(trace)
    print("\n".join(["replayed step:", *touched]))
    assert len(touched) <= MOST_MODULES, touched
    assert {"adapters/agent.py", "adapters/runs/episode.py", "osharm_core"} <= set(touched)
    assert "adapters/trajectories/osharm.py" in touched  # the recorder


def test_a_step_of_a_live_model_walks_the_natural_path(
    trace: _Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a model over HTTP (a loopback server), a step touches at most 15 modules too."""
    monkeypatch.setenv("LOOPBACK_KEY", "sk-loopback-key-1234")
    with LoopbackServer() as server:
        for text in (CLICK, CLICK, "DONE"):
            server.enqueue(Reply(200, chat_completion(text)))
        argv = ["run", str(EXAMPLE), "--model", "compat/m", "--format", "osharm"]
        argv += ["--base-url", server.base_url + "/v1", "--api-key-env", "LOOPBACK_KEY"]
        assert main([*argv, "--out", str(tmp_path / "out"), "--instruction", "Open it"]) == 0
    touched = _first_step(trace)
    print("\n".join(["live step:", *touched]))
    assert len(touched) <= MOST_MODULES, touched
    assert "model client" in touched
