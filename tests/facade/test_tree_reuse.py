"""Each step's tree is parsed once: the result folder takes the agent's table, and the agent
builds a prompt with a large tree off the event loop (a small one in place). The bytes written
are those of a writer parsing it again."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest

from adapters import agent as agent_module
from adapters.agent import PromptAgent
from adapters.runs import OsworldTask, arun_task_list, in_thread, run_task_list
from adapters.testing import FakeClient
from adapters.trajectories import osharm
from adapters.trajectories.osharm import BETTER_LOG, ResultWriter, TaskInfo
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, linearize_accessibility_tree
from osharm_core.state import ObservationRecord
from osharm_core.step import LinearizedTree, StepRequest
from tests.conftest import reply_step
from tests.facade.helpers import SMALL, load, observation_folder

CONFIG = AgentConfig(model="m", observation_type="screenshot_a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
TASKS = [OsworldTask(domain="d", example_id=f"t{i}", instruction="Do it") for i in range(2)]


def _tree(name: str) -> str:
    tree = load(name)["accessibility_tree"]
    assert isinstance(tree, str)
    return tree


def _written(folder: Path) -> bytes:
    return (folder / BETTER_LOG).read_bytes()


def _writer(folder: Path, platform: str = "ubuntu") -> ResultWriter:
    config = AgentConfig(model="m", observation_type="a11y_tree", platform=platform)  # type: ignore[arg-type]
    task = TaskInfo(instruction="x", domain="d", example_id="e")
    return ResultWriter(folder, config=config, task=task, max_steps=3)


def test_the_writer_takes_a_table_only_for_the_very_tree_and_settings(tmp_path: Path) -> None:
    tree = _tree(SMALL[0])
    other = _tree(SMALL[1])
    given = LinearizedTree(tree, "ubuntu", False, "the agent's table")
    cases = [
        (given, tree, "the agent's table"),
        (given, "".join(tree), "the agent's table"),  # equal text, another object
        (given, other, linearize_accessibility_tree(other)),
        # Bytes are read as the agent reads them (`tree_text`): the same text, the same table.
        (given, tree.encode(), "the agent's table"),
        (given, memoryview(tree.encode("utf-16")), "the agent's table"),
        (given, other.encode(), linearize_accessibility_tree(other)),
        (LinearizedTree(tree, "ubuntu", True, "x"), tree, linearize_accessibility_tree(tree)),
        (LinearizedTree(tree, "windows", False, "x"), tree, linearize_accessibility_tree(tree)),
        (None, tree, linearize_accessibility_tree(tree)),
    ]
    for number, (known, seen, table) in enumerate(cases):
        writer = _writer(tmp_path / str(number))
        step = reply_step(CONFIG, "r", None, {"accessibility_tree": seen})
        if known is not None:
            request = StepRequest((), ObservationRecord(), linearized=known)
            step = attrs.evolve(step, request=request)
        writer.step(step)
        reference = _writer(tmp_path / f"{number}-reference")
        reference.step(reply_step(CONFIG, "r", None, {"accessibility_tree": seen}))
        if table == linearize_accessibility_tree(seen):
            assert _written(writer.directory) == _written(reference.directory)
        assert json.loads(_written(writer.directory))["steps"][0]["a11y_tree"] == table


@pytest.fixture
def writer_never_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The result writer's own linearization, made to fail loudly if it is ever reached."""
    calls: list[str] = []

    def refuse(tree: Any, *args: Any, **kwargs: Any) -> str:
        calls.append("writer")
        raise AssertionError("the writer parsed a tree the agent had parsed")

    monkeypatch.setattr(osharm, "linearize_accessibility_tree", refuse)
    return calls


def _folders_as_reference(tmp_path: Path, results: Path, desktop: Path) -> None:
    """The same run with the writer parsing each tree itself writes the same better_log
    (but for the screenshot names, which hold the time)."""
    reference = tmp_path / "reference"
    run_task_list(
        TASKS,
        config=CONFIG,
        result_dir=reference,
        make_agent=lambda task: PromptAgent.from_config(CONFIG, client=FakeClient([CLICK] * 3)),
        make_env=lambda task: ReplayEnv(desktop, instruction=task.instruction),
        max_steps=3,
    )
    logs = sorted(results.rglob(BETTER_LOG))
    assert len(logs) == len(TASKS)
    for log in logs:
        ours, theirs = (
            json.loads(log.read_bytes()),
            json.loads((reference / log.relative_to(results)).read_bytes()),
        )
        for step in (*ours["steps"], *theirs["steps"]):
            assert step.pop("screenshot_file").startswith("step_")
        assert ours == theirs
        assert all(step["a11y_tree"].startswith("tag\tname") for step in ours["steps"])


def test_a_run_parses_each_tree_once(writer_never_parses: list[str], tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "desktop", SMALL * 2)
    run_task_list(
        TASKS,
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=lambda task: PromptAgent.from_config(CONFIG, client=FakeClient([CLICK] * 3)),
        make_env=lambda task: ReplayEnv(desktop, instruction=task.instruction),
        max_steps=3,
    )
    assert writer_never_parses == []


def _async_run(tmp_path: Path, desktop: Path) -> tuple[int, set[int]]:
    """Two tasks on two workers: the loop's thread, and the threads each prompt was built in."""
    threads: set[int] = set()

    class Agent(PromptAgent):
        def _begin(self, instruction: str, obs: Any) -> Any:
            threads.add(threading.get_ident())
            return super()._begin(instruction, obs)

    async def run() -> int:
        await arun_task_list(
            TASKS,
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda task: Agent.from_config(CONFIG, client=FakeClient([CLICK] * 3)),
            make_env=lambda task: in_thread(ReplayEnv(desktop, instruction=task.instruction)),
            max_steps=3,
            workers=2,
        )
        return threading.get_ident()

    return asyncio.run(run()), threads


@pytest.mark.parametrize("offloaded", [True, False], ids=["large-trees", "small-trees"])
def test_an_async_run_parses_each_tree_once_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offloaded: bool
) -> None:
    desktop = observation_folder(tmp_path / "desktop", SMALL * 2)
    real = osharm.linearize_accessibility_tree

    def refuse(tree: Any, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("the writer parsed a tree the agent had parsed")

    monkeypatch.setattr(osharm, "linearize_accessibility_tree", refuse)
    if offloaded:  # these trees count as large: their prompts take real work
        monkeypatch.setattr(agent_module, "INLINE_TREE_CHARS", 1000)
    assert all(len(_tree(name)) > 1000 for name in SMALL)
    loop_thread, threads = _async_run(tmp_path, desktop)
    assert threads
    if offloaded:
        assert loop_thread not in threads
    else:  # built in place: a hand-off would cost more than the work
        assert threads == {loop_thread}
    monkeypatch.setattr(osharm, "linearize_accessibility_tree", real)
    _folders_as_reference(tmp_path, tmp_path / "results", desktop)


def test_only_prompts_without_real_work_are_built_in_place() -> None:
    small, large = {"accessibility_tree": "<a/>"}, {"accessibility_tree": "x" * 80_001}
    cheap = agent_module._cheap_prompt
    assert cheap(CONFIG, small)
    assert not cheap(CONFIG, large)
    assert cheap(attrs.evolve(CONFIG, observation_type="screenshot"), large)
    assert not cheap(attrs.evolve(CONFIG, observation_type="som"), small)
    assert not cheap(attrs.evolve(CONFIG, scaling="claude"), small)
    assert not cheap(attrs.evolve(CONFIG, server_profile="nginx"), small)
