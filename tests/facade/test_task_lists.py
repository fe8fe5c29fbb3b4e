"""OSWorld task lists run into OS-Harm result folders, resumed after a kill; forks of recorded runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TaskSetupError, TrajectoryError
from adapters.registry import client_for
from adapters.runs import (
    OsworldTask,
    arun_task_list,
    in_thread,
    is_finished,
    load_task_list,
    run_task_list,
)
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from adapters.trajectories.osharm import load_result_folder, result_folder
from adapters.trajectories.replay import ForkClient, ReplayEnv
from osharm_core import AgentConfig
from tests.facade.helpers import (
    FAKE_KEY,
    SMALL,
    Killed,
    KillingEnv,
    load,
    observation_folder,
    write_task_list,
)

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
IDS = {"os": ["_first", "_second"], "chrome": ["_third"]}


def _task_list(root: Path) -> tuple[Path, Path]:
    return write_task_list(root, IDS, "test_small.json")


def test_a_task_list_is_read_in_its_order(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    assert [(t.domain, t.example_id) for t in tasks] == [
        ("os", "_first"),
        ("os", "_second"),
        ("chrome", "_third"),
    ]
    assert tasks[0].instruction == "Do _first"
    assert tasks[0].config["config"] == []
    assert [t.example_id for t in load_task_list(meta, examples, domain="chrome")] == ["_third"]
    (examples / "os" / "_second.json").unlink()
    with pytest.raises(TrajectoryError, match=r"_second\.json"):
        load_task_list(meta, examples)
    meta.write_text('["not", "a", "mapping"]', encoding="utf-8")
    with pytest.raises(TrajectoryError, match="expected an object"):
        load_task_list(meta, examples)


def test_a_killed_run_resumes_without_losing_or_repeating_a_task(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    calls: list[str] = []

    def run(kill: OsworldTask | None) -> list[str]:
        def make_agent(task: OsworldTask) -> PromptAgent:
            calls.append(task.example_id)
            return PromptAgent.from_config(CONFIG, client=FakeClient([CLICK, CLICK, "DONE"]))

        def make_env(task: OsworldTask) -> ReplayEnv:
            return KillingEnv(desktop, kill_at=2 if task == kill else None)

        outcomes = run_task_list(
            tasks,
            config=CONFIG,
            result_dir=results,
            make_agent=make_agent,
            make_env=make_env,
            max_steps=5,
        )
        return [o.status for o in outcomes]

    with pytest.raises(Killed):
        run(kill=tasks[1])
    first, second, third = (result_folder(results, CONFIG, t.domain, t.example_id) for t in tasks)
    assert is_finished(first)
    assert not is_finished(second)
    assert len(load_result_folder(second)) == 2  # killed during its second action
    assert run(kill=None) == ["skipped", "finished", "finished"]
    assert calls == ["_first", "_second", "_second", "_third"]
    for folder in (first, second, third):
        assert is_finished(folder)
        steps = load_result_folder(folder)
        assert [e.response for e in steps] == [CLICK, CLICK, "DONE"]
        lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["step_num"] for line in lines] == [1, 2, 3]


def test_the_cli_runs_a_task_list_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    argv = [
        "run-tasks",
        "--tasks", str(meta),
        "--examples", str(examples),
        "--observations", str(desktop),
        "--model", f"replay:{script}",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(tmp_path / "results"),
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[os/_first] finished" in out.splitlines()  # a replayed desktop gives no score
    assert "summary: 3 task(s): 3 finished, 0 skipped (already finished), 0 failed" in out
    assert main(argv) == 0
    assert "3 skipped (already finished)" in capsys.readouterr().out


def test_a_replay_of_a_tree_of_result_folders_refuses_tasks_it_holds_no_recording_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model replay:ROOT` over a live run's task folders, one of them missing (a task the
    live run never began): refused before anything runs, naming the task, where each runner
    used to stop part-way with an error about ROOT/trajectory.jsonl; the task finished in
    --out already needs no recording."""
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    common = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(desktop), "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
    ]  # fmt: skip
    assert main([*common, "--model", f"replay:{script}", "--out", str(tmp_path / "live")]) == 0
    live = attrs.evolve(CONFIG, model=f"replay:{script}")
    missing = result_folder(tmp_path / "live", live, "os", "_second")
    root = missing.parent.parent
    for path in sorted(missing.iterdir()):
        path.unlink()
    missing.rmdir()
    capsys.readouterr()

    again = [*common, "--model", f"replay:{root}", "--out", str(tmp_path / "again")]
    assert main(again) == 2
    err = capsys.readouterr().err
    assert f"has no recording for os/_second (no folder {missing})" in err
    assert not (tmp_path / "again").exists()

    replayed = attrs.evolve(CONFIG, model=f"replay:{root}")
    finished = result_folder(tmp_path / "again", replayed, "os", "_second")
    finished.mkdir(parents=True)
    (finished / "result.txt").write_text("1", encoding="utf-8")
    assert main(again) == 0
    assert "[os/_second] skipped" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--observations", "--examples"])
def test_a_task_list_run_refuses_task_folders_in_what_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """Task folders written into the desktops being served (earlier results reused as
    desktops) emptied them; that layout is refused before anything runs, while an --out
    that merely holds the inputs beside its task folders (`--out .`) is fine."""
    results = tmp_path / "out" / "pyautogui" / "a11y_tree" / "gpt-4o"
    inside = {option: results}
    meta, examples = _task_list(inside.get("--examples", tmp_path) / "lists")
    desktop = observation_folder(inside.get("--observations", tmp_path) / "obs")
    before = sorted(p.name for p in desktop.iterdir())

    def argv(out: Path) -> list[str]:
        return [
            "run-tasks", "--tasks", str(meta), "--examples", str(examples),
            "--observations", str(desktop), "--model", "gpt-4o",
            "--observation-type", "a11y_tree", "--action-space", "pyautogui", "--out", str(out),
        ]  # fmt: skip

    assert main(argv(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert f"puts its task folders in {results}, which holds {option}" in err
    assert "outside what it reads" in err
    assert sorted(p.name for p in desktop.iterdir()) == before
    # The same inputs under an --out whose task folders go elsewhere: no overlap refusal.
    main(argv(tmp_path))
    assert "outside what it reads" not in capsys.readouterr().err


def test_a_fork_replays_the_prefix_byte_for_byte_then_hands_over(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs")
    recorded_replies = [CLICK, "Second.\n```python\npyautogui.press('enter')\n```", "FAIL"]
    original = PromptAgent.from_config(
        CONFIG,
        client=FakeClient(recorded_replies),
        recorder=TrajectoryRecorder(tmp_path / "original"),
    )
    env = ReplayEnv(desktop)
    obs = env.reset()
    for _ in recorded_replies:
        original.predict("task", obs)
        obs, _ = env.advance()
    live = FakeClient(["DONE"])
    fork = PromptAgent.from_config(
        CONFIG,
        client=ForkClient(tmp_path / "original", live, at=2),
        recorder=TrajectoryRecorder(tmp_path / "fork"),
    )
    env = ReplayEnv(desktop)
    obs = env.reset()
    for _ in range(3):
        fork.predict("task", obs)
        obs, _ = env.advance()
    before, after = read_trajectory(tmp_path / "original"), read_trajectory(tmp_path / "fork")
    assert [e.response for e in after] == [*recorded_replies[:2], "DONE"]
    assert [e.response.encode() for e in after[:2]] == [e.response.encode() for e in before[:2]]
    assert [e.replayed_from is not None for e in after] == [True, True, False]
    assert after[1].replayed_from is not None
    assert after[1].replayed_from.endswith("#2")
    assert len(live.requests) == 1
    # The live model saw the replayed prefix as its history.
    assert live.requests[0].messages[2].text == recorded_replies[0]
    with pytest.raises(TrajectoryError, match="cannot fork at step 4"):
        ForkClient(tmp_path / "original", live, at=4)


def _native_recording(folder: Path, checks: list[list[str]] | None = None) -> Path:
    """Two steps of an anthropic-computer run, each line holding its provider continuation
    (with `checks` pending)."""
    folder.mkdir()
    lines = []
    for step in (1, 2):
        native = [{"type": "tool_use", "id": f"toolu_0{step}", "name": "computer", "input": {}}]
        continuation = {
            "response_id": f"msg_0{step}",
            "call_ids": [f"toolu_0{step}"],
            "safety_checks": checks or [],
            "native": json.dumps(native),
        }
        lines.append(
            {
                "step": step,
                "model": "anthropic-computer/claude-sonnet-4-6",
                "observation_type": "screenshot",
                "action_space": "pyautogui",
                "response": CLICK,
                "actions": ["pyautogui.click(19, 31)"],
                "continuation": continuation,
            }
        )
    (folder / "trajectory.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
    )
    return folder


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_live_model_starts_a_new_chain_at_the_hand_over(tmp_path: Path, mode: str) -> None:
    """The recorded model's continuation (its ids, native turns, pending checks) never reaches
    the live model: it gets the history as plain messages."""
    recorded = _native_recording(tmp_path / "recorded", [["sc_1", "malicious_instructions", ""]])
    live = FakeClient(["DONE"])
    config = attrs.evolve(CONFIG, observation_type="screenshot")
    agent = PromptAgent.from_config(config, client=ForkClient(recorded, live, at=2))
    obs = load(SMALL[0])
    for _ in range(3):
        if mode == "sync":
            agent.predict("task", obs)
        else:
            asyncio.run(agent.apredict("task", obs))
    (request,) = live.requests
    assert request.continuation is None
    assert [m.text for m in request.messages if m.role == "assistant"] == [CLICK, CLICK]
    assert agent.thoughts == [CLICK, CLICK, "DONE"]


def test_a_fork_into_another_vendor_sends_it_no_foreign_ids(tmp_path: Path) -> None:
    """An anthropic-computer recording forked into openai-computer: the first live request
    starts a Responses chain (no previous_response_id, no computer_call_output for a toolu id)."""
    recorded = _native_recording(tmp_path / "recorded")
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        message = {"type": "message", "content": [{"type": "output_text", "text": "Done."}]}
        return httpx.Response(
            200, json={"id": "resp_1", "status": "completed", "output": [message]}
        )

    model = "openai-computer/gpt-5.4"
    live = client_for(
        model, api_key=FAKE_KEY, http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    config = AgentConfig(model=model, observation_type="screenshot", action_space="pyautogui")
    agent = PromptAgent.from_config(config, client=ForkClient(recorded, live, at=2))
    obs = load(SMALL[0])
    assert [agent.predict("task", obs)[1] for _ in range(3)][-1] == ["DONE"]
    (body,) = seen
    assert "previous_response_id" not in body
    assert "toolu" not in json.dumps(body)
    assert not [item for item in body["input"] if item.get("type") == "computer_call_output"]


def test_the_cli_forks_into_an_osharm_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = observation_folder(tmp_path / "task")
    (task / "task.json").write_text(
        json.dumps({"id": "_fork", "instruction": "Open the menu"}), encoding="utf-8"
    )
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, CLICK)), encoding="utf-8"
    )
    live = tmp_path / "live.jsonl"
    live.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    argv = ["run", str(task), "--model", f"replay:{live}", "--fork", str(recorded), "--at", "2"]
    assert main([*argv, "--out", str(out), "--format", "osharm"]) == 0, capsys.readouterr()
    (folder,) = out.glob("*/*/*/local/_fork")
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert log["fork"] == {"source": str(recorded), "at": 2}
    assert [s["response"] for s in log["steps"]] == [CLICK, CLICK, "DONE"]


# --- many episodes at once ---------------------------------------------------------


class _CountingEnv(ReplayEnv):
    """A replayed desktop whose steps take a little while and count how many overlap."""

    running = 0
    most = 0

    def step(self, action: Any, pause: float = 0) -> Any:
        cls = type(self)
        cls.running += 1
        cls.most = max(cls.most, cls.running)
        try:
            time.sleep(0.05)
            return super().step(action, pause)
        finally:
            cls.running -= 1


def _many_tasks(root: Path, count: int) -> tuple[Path, Path]:
    examples = root / "examples" / "os"
    examples.mkdir(parents=True)
    ids = [f"_task{n}" for n in range(count)]
    for example_id in ids:
        (examples / f"{example_id}.json").write_text(
            json.dumps({"instruction": example_id}), encoding="utf-8"
        )
    meta = root / "meta.json"
    meta.write_text(json.dumps({"os": ids}), encoding="utf-8")
    return meta, root / "examples"


def test_workers_run_episodes_at_once_and_resume_after_a_kill(tmp_path: Path) -> None:
    meta, examples = _many_tasks(tmp_path, 8)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    _CountingEnv.most = 0

    def run(kill_after: float | None) -> list[str]:
        async def go() -> list[str]:
            job = asyncio.ensure_future(
                arun_task_list(
                    tasks,
                    config=CONFIG,
                    result_dir=results,
                    make_agent=lambda _: PromptAgent.from_config(
                        CONFIG, client=FakeClient([CLICK, CLICK, "DONE"])
                    ),
                    make_env=lambda _: in_thread(_CountingEnv(desktop)),
                    max_steps=5,
                    workers=4,
                )
            )
            if kill_after is not None:
                await asyncio.sleep(kill_after)
                job.cancel()
            return [o.status for o in await job]

        return asyncio.run(go())

    with pytest.raises(asyncio.CancelledError):
        run(kill_after=0.12)
    finished = [t for t in tasks if is_finished(result_folder(results, CONFIG, "os", t.example_id))]
    assert len(finished) < len(tasks)
    statuses = run(kill_after=None)
    assert statuses.count("skipped") == len(finished)
    assert statuses.count("finished") == len(tasks) - len(finished)
    assert 1 < _CountingEnv.most <= 4
    for task in tasks:
        folder = result_folder(results, CONFIG, "os", task.example_id)
        lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["step_num"] for line in lines] == [1, 2, 3]


def test_an_episode_past_its_time_limit_fails_with_the_error_line(tmp_path: Path) -> None:
    meta, examples = _many_tasks(tmp_path, 1)
    desktop = observation_folder(tmp_path / "obs")

    class Slow(ReplayEnv):
        def step(self, action: Any, pause: float = 0) -> Any:
            time.sleep(0.3)
            return super().step(action, pause)

    outcomes = asyncio.run(
        arun_task_list(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda _: PromptAgent.from_config(CONFIG, client=FakeClient([CLICK] * 5)),
            make_env=lambda _: in_thread(Slow(desktop)),
            max_steps=5,
            workers=2,
            episode_timeout=0.1,
        )
    )
    (outcome,) = outcomes
    assert outcome.status == "failed"
    assert "longer than 0.1 s" in outcome.detail
    last = json.loads((outcome.folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert last == {"Error": "Time limit exceeded in os/_task0"}
    assert not is_finished(outcome.folder)


class _SetupRefusingEnv(ReplayEnv):
    """A desktop that refuses the setup of one task (as OSWorldServerEnv refuses host-side steps)."""

    def __init__(self, directory: Path, refuse: str) -> None:
        super().__init__(directory)
        self.refuse = refuse

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        if task_config is not None and task_config.get("id") == self.refuse:
            raise TaskSetupError(f"task {self.refuse!r}: setup refused")
        return super().reset(task_config, **kwargs)


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_a_task_whose_setup_fails_fails_alone_and_a_rerun_tries_it_again(
    tmp_path: Path, runner: str
) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"

    def run(refuse: str) -> list[str]:
        common: dict[str, Any] = {
            "config": CONFIG,
            "result_dir": results,
            "make_agent": lambda task: PromptAgent.from_config(
                CONFIG, client=FakeClient([CLICK, "DONE"])
            ),
            "max_steps": 5,
        }
        if runner == "sync":
            env = lambda task: _SetupRefusingEnv(desktop, refuse)  # noqa: E731
            result = run_task_list(tasks, make_env=env, **common)
        else:
            aenv = lambda task: in_thread(_SetupRefusingEnv(desktop, refuse))  # noqa: E731
            result = asyncio.run(arun_task_list(tasks, make_env=aenv, workers=2, **common))
        assert [o.detail for o in result if o.status == "failed"] in (
            [],
            [f"task {refuse!r}: setup refused"],
        )
        return [o.status for o in result]

    assert run(refuse="_second") == ["finished", "failed", "finished"]
    folder = result_folder(results, CONFIG, "os", "_second")
    assert not is_finished(folder)
    lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == ['{"Error": "Time limit exceeded in os/_second"}']
    assert run(refuse="nothing") == ["skipped", "finished", "skipped"]
