"""A half-finished episode can continue from its last recorded step instead of from its start."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from adapters.accounting import Budget, UsageTotals, load_prices
from adapters.agent import PromptAgent
from adapters.contract import ModelResponse, Usage
from adapters.errors import BudgetExceeded, TaskSetupError, TrajectoryError
from adapters.record import ActionRecord, EpisodeEnd
from adapters.runs import OsworldTask, arun_task_list, in_thread, is_finished, run_task_list
from adapters.testing import FakeClient
from adapters.trajectories import jsonl_read, osharm, result_folders
from adapters.trajectories.osharm import ResultWriter, TaskInfo, load_result_folder, result_folder
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig
from tests.conftest import reply_step, write_named
from tests.facade.helpers import Killed, KillingEnv, observation_folder, snapshot

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
PRESS = "Pressing.\n```python\npyautogui.press('enter')\n```"
TASK = OsworldTask(domain="os", example_id="_one", instruction="Do it")
#: A dollar a million tokens for gpt-4o, so a 100,000-token step costs $0.10.
PRICES = load_prices(
    {
        "version": "test",
        "models": [
            {
                "model": "gpt-4o",
                "input": 1.0,
                "cached_input": 0.5,
                "output": 1.0,
                "read": "2026-11-26",
                "source": "https://example.org/prices",
            }
        ],
    }
)


def _continue(
    results: Path,
    desktop: Path,
    replies: list[Any],
    kill_at: int | None,
    *,
    config: AgentConfig = CONFIG,
    budget: Budget | None = None,
) -> tuple[FakeClient, Any]:
    """One synchronous run of TASK with `continue_unfinished`: its model and its result."""
    client = FakeClient(replies)
    result = run_task_list(
        [TASK],
        config=config,
        result_dir=results,
        make_agent=lambda task: PromptAgent.from_config(config, client=client),
        make_env=lambda task: KillingEnv(desktop, kill_at),
        max_steps=5,
        continue_unfinished=True,
        budget=budget,
    )
    return client, result


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_episode_continues_from_its_recorded_steps(tmp_path: Path, mode: str) -> None:
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    envs: list[KillingEnv] = []

    def run(replies: list[str], kill_at: int | None, clients: list[FakeClient]) -> Any:
        def make_agent(task: OsworldTask) -> PromptAgent:
            clients.append(FakeClient(replies))
            return PromptAgent.from_config(CONFIG, client=clients[-1])

        def make_env(task: OsworldTask) -> Any:
            envs.append(KillingEnv(desktop, kill_at))
            return envs[-1] if mode == "sync" else in_thread(envs[-1])

        common: dict[str, Any] = {
            "config": CONFIG,
            "result_dir": results,
            "make_agent": make_agent,
            "make_env": make_env,
            "max_steps": 5,
            "continue_unfinished": True,
        }
        if mode == "sync":
            return run_task_list([TASK], **common)
        return asyncio.run(arun_task_list([TASK], workers=1, **common))

    first: list[FakeClient] = []
    with pytest.raises(Killed):
        run([CLICK, PRESS, "DONE"], kill_at=2, clients=first)
    folder = result_folder(results, CONFIG, "os", "_one")
    assert len(load_result_folder(folder)) == 2
    assert not is_finished(folder)

    live: list[FakeClient] = []
    result = run(["DONE"], kill_at=None, clients=live)
    assert [o.status for o in result] == ["finished"]
    assert len(live[0].requests) == 1  # only the step that was never recorded
    assert envs[-1].actions == ["pyautogui.click(19, 31)", "pyautogui.press('enter')", "DONE"]
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert log["fork"] == {"source": str(folder), "at": 2, "resumed": True}
    lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step_num"] for line in lines] == [1, 2, 3]


def test_by_default_an_unfinished_episode_is_redone_from_its_start(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs")
    folder = result_folder(tmp_path / "results", CONFIG, "os", "_one")
    calls: list[FakeClient] = []

    def make_agent(task: OsworldTask) -> PromptAgent:
        calls.append(FakeClient([CLICK, "DONE"]))
        return PromptAgent.from_config(CONFIG, client=calls[-1])

    for _ in range(2):
        run_task_list(
            [TASK],
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=make_agent,
            make_env=lambda task: ReplayEnv(desktop),
            max_steps=5,
        )
        (folder / "unscored.txt").unlink()  # as if killed before the end mark
    assert [len(c.requests) for c in calls] == [2, 2]
    assert "fork" not in json.loads((folder / "better_log.json").read_text(encoding="utf-8"))


class BrokenSetupEnv(ReplayEnv):
    """A VM whose task setup fails (or that goes away) before the episode begins."""

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        raise TaskSetupError("config[0] (launch): POST /setup/launch: HTTP 500")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_continuation_that_fails_before_it_begins_keeps_the_record(
    tmp_path: Path, mode: str
) -> None:
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")

    def run(replies: list[str], env: ReplayEnv) -> Any:
        common: dict[str, Any] = {
            "config": CONFIG,
            "result_dir": results,
            "make_agent": lambda t: PromptAgent.from_config(CONFIG, client=FakeClient(replies)),
            "make_env": (lambda t: env) if mode == "sync" else (lambda t: in_thread(env)),
            "max_steps": 5,
            "continue_unfinished": True,
        }
        if mode == "sync":
            return run_task_list([TASK], **common)
        return asyncio.run(arun_task_list([TASK], workers=1, **common))

    with pytest.raises(Killed):
        run([CLICK, PRESS, "DONE"], KillingEnv(desktop, 2))
    assert len(load_result_folder(folder)) == 2
    (failed,) = run([], BrokenSetupEnv(desktop))
    assert (failed.status, failed.detail) == (
        "failed",
        "config[0] (launch): POST /setup/launch: HTTP 500",
    )
    assert len(load_result_folder(folder)) == 2  # the record is still there for the next try
    (done,) = run(["DONE"], ReplayEnv(desktop))
    assert done.status == "finished"
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


class CapReachedDuringReset(ReplayEnv):
    """While this task's VM resets, another worker's step uses up the run's token cap (the
    task passed the run-cap check before it started)."""

    def __init__(self, directory: Path, budget: Budget) -> None:
        super().__init__(directory)
        self.budget = budget

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        self.budget.charge(UsageTotals(steps=1, tokens=5_000, input_tokens=5_000))
        return super().reset(task_config=task_config, **kwargs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_continuation_stopped_by_the_run_cap_before_its_first_request_keeps_the_record(
    tmp_path: Path, mode: str
) -> None:
    """It is `stopped` (not started: its recorded steps are replayed for free, and its first
    live request is the one refused) and its folder is left byte for byte as it was: it used
    to be emptied all the same, so the recorded (paid) steps were lost and the next run redid
    them; then its replayed steps were written again (new timestamps, a `fork` entry)."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    recorded = [e.response for e in load_result_folder(folder)]
    before = snapshot(folder)
    time.sleep(1.05 - time.time() % 1)  # a replayed step written again would get a new stamp

    budget = Budget(max_run_tokens=1_000)
    env = CapReachedDuringReset(desktop, budget)
    common: dict[str, Any] = {
        "config": CONFIG,
        "result_dir": results,
        "make_agent": lambda t: PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"])),
        "make_env": (lambda t: env) if mode == "sync" else (lambda t: in_thread(env)),
        "max_steps": 5,
        "continue_unfinished": True,
        "budget": budget,
    }
    if mode == "sync":
        (outcome,) = run_task_list([TASK], **common)
    else:
        (outcome,) = asyncio.run(arun_task_list([TASK], workers=1, **common))
    assert outcome.status == "stopped"
    assert snapshot(folder) == before
    assert [e.response for e in load_result_folder(folder)] == recorded == [CLICK, PRESS]

    client, result = _continue(results, desktop, ["DONE"], kill_at=None)
    assert [o.status for o in result] == ["finished"]
    assert len(client.requests) == 1  # the two recorded steps were continued from
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_directory_where_the_writer_keeps_a_file_is_refused_before_anything_runs(
    tmp_path: Path, mode: str
) -> None:
    """Named, before any model call or environment, and the record is left as it was (it used
    to be deleted, then the run stopped on a raw IsADirectoryError)."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    (folder / "step_0.png").unlink()
    (folder / "step_0.png").mkdir()
    before = sorted(p.name for p in folder.iterdir())
    built: list[str] = []

    def make_env(task: OsworldTask) -> Any:
        built.append("env")
        return ReplayEnv(desktop) if mode == "sync" else in_thread(ReplayEnv(desktop))

    common: dict[str, Any] = {
        "config": CONFIG,
        "result_dir": results,
        "make_agent": lambda t: built.append("agent"),
        "make_env": make_env,
        "max_steps": 5,
        "continue_unfinished": True,
    }
    message = f"the result folder {folder} holds step_0.png, a directory, where its writer keeps"

    def run() -> Any:
        if mode == "sync":
            return run_task_list([TASK], **common)
        return asyncio.run(arun_task_list([TASK], workers=1, **common))

    with pytest.raises(TrajectoryError, match=re.escape(message)):
        run()
    assert built == []
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_deferred_writer_keeps_the_folder_until_its_first_model_call(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    before = sorted(p.name for p in folder.iterdir())
    info = TaskInfo(instruction="Do it", domain="os", example_id="_one")
    writer = ResultWriter(
        folder, config=CONFIG, task=info, max_steps=5, overwrite=True, deferred=True
    )
    observation = ReplayEnv(desktop).reset()
    writer.begin(observation)
    writer.finish(EpisodeEnd(failed="x"))  # failed before its first model call: the record stays
    assert sorted(p.name for p in folder.iterdir()) == before
    writer.step(reply_step(CONFIG, "DONE", ["DONE"], observation))
    assert sorted(p.name for p in folder.iterdir()) == [
        "better_log.json",
        "step_0.png",
        "step_0.xml",
    ]


def test_a_deferred_writer_holds_replayed_steps_until_a_live_one_then_writes_them_as_taken(
    tmp_path: Path,
) -> None:
    """Replayed (prepaid) steps and their actions are held, not written: a continuation
    stopped at its first live request leaves the record as it was (they used to be written
    at once, under new timestamps); the first live step writes them with the names and
    stamps they were given when they ran."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    before = snapshot(folder)
    times = iter([datetime(2030, 1, 2, 3, 4, 5), datetime(2031, 1, 1)])
    info = TaskInfo(instruction="Do it", domain="os", example_id="_one")
    writer = ResultWriter(
        folder,
        config=CONFIG,
        task=info,
        max_steps=5,
        overwrite=True,
        deferred=True,
        clock=lambda: next(times),
    )
    env = ReplayEnv(desktop)
    first = env.reset()
    writer.begin(first)
    writer.step(reply_step(CONFIG, CLICK, ["pyautogui.click(19, 31)"], first, prepaid=True))
    after, reward, done, step_info = env.step("pyautogui.click(19, 31)")
    action = "pyautogui.click(19, 31)"
    writer.action(
        ActionRecord(
            step=1,
            action=action,
            observation=after,
            reward=reward,
            done=done,
            info=step_info,
            started=next(times),
        )
    )
    writer.finish(EpisodeEnd(failed="x"))  # stopped or failed before a live call: nothing written
    assert snapshot(folder) == before
    writer.step(reply_step(CONFIG, "DONE", ["DONE"], after))
    assert sorted(snapshot(folder)) == [
        "better_log.json",
        "step_0.png",
        "step_0.xml",
        "step_1_20300102@030405.png",
        "step_1_20300102@030405.xml",
        "traj.jsonl",
    ]
    (line,) = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["action_timestamp"] == "20300102@030405"
    steps = [e.response for e in load_result_folder(folder)]
    assert steps == [CLICK, "DONE"]
    assert (folder / "step_1_20300102@030405.png").read_bytes() == after["screenshot"]


def test_a_kill_while_the_held_steps_are_written_keeps_the_record_to_continue_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claiming the folder empties it and writes the held steps before the new better_log:
    a kill in between left no better_log.json, so the next run redid the task from its
    start, asking again for every reply already paid for. The old log stays until replaced."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    log = (folder / "better_log.json").read_bytes()
    info = TaskInfo(instruction="Do it", domain="os", example_id="_one")
    writer = ResultWriter(
        folder, config=CONFIG, task=info, max_steps=5, overwrite=True, deferred=True
    )
    env = ReplayEnv(desktop)
    first = env.reset()
    writer.begin(first)
    writer.step(reply_step(CONFIG, CLICK, ["pyautogui.click(19, 31)"], first, prepaid=True))

    def killed(*_: Any) -> None:
        raise Killed

    # The kill lands on the first held write (step_0.png), after the folder was emptied.
    monkeypatch.setattr(osharm, "_write_atomically", killed)
    with pytest.raises(Killed):
        writer.step(reply_step(CONFIG, "DONE", ["DONE"], first))
    assert (folder / "better_log.json").read_bytes() == log
    assert [e.response for e in load_result_folder(folder)][:1] == [CLICK]


@pytest.mark.parametrize(
    "change",
    [{"max_trajectory_length": 1}, {"a11y_tree_max_tokens": 500}, {"client_password": "other"}],
    ids=["history", "tree-budget", "password"],
)
def test_steps_recorded_under_other_prompt_settings_are_redone_not_continued(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """Their replies answered other prompts: carried over, the folder would mix two runs."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"

    def run(config: AgentConfig, replies: list[str], kill_at: int | None) -> FakeClient:
        return _continue(results, desktop, replies, kill_at, config=config)[0]

    with pytest.raises(Killed):
        run(CONFIG, [CLICK, PRESS, "DONE"], kill_at=2)
    folder = result_folder(results, CONFIG, "os", "_one")
    assert len(load_result_folder(folder)) == 2
    changed = attrs.evolve(CONFIG, **change)
    live = run(changed, [CLICK, PRESS, "DONE"], kill_at=None)
    assert len(live.requests) == 3  # from the start
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert "fork" not in log
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


def test_a_continued_episode_under_a_dollar_cap_replays_its_record_for_free(
    tmp_path: Path,
) -> None:
    """Result folders keep no usage, so the replayed steps' cost is unknown: they were paid
    for by the run that recorded them and count nothing, so a dollar cap neither stops the
    replay (it used to, after one step, marking the task finished with its record cut to one
    step) nor counts them; the live steps are charged as usual."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"

    def paid(text: str) -> ModelResponse:  # $0.10 a step
        return ModelResponse(
            text=text, model="gpt-4o", usage=Usage(input_tokens=100_000, output_tokens=0)
        )

    def run(replies: list[Any], kill_at: int | None) -> Any:
        budget = Budget(max_episode_cost=1.0, prices=PRICES)
        return _continue(results, desktop, replies, kill_at, budget=budget)[1]

    with pytest.raises(Killed):
        run([paid(CLICK), paid(PRESS), paid("DONE")], kill_at=2)
    folder = result_folder(results, CONFIG, "os", "_one")
    result = run([paid("DONE")], kill_at=None)
    (outcome,) = result
    assert outcome.status == "finished"
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]
    assert outcome.usage.cost_usd == pytest.approx(0.1)  # the live step only
    assert outcome.usage.tokens == 100_000


@pytest.mark.parametrize(
    ("name", "odd_file"),
    [("step_99999999999_zz.png", "step_²_x.png"), ("step_²_zz.png", "step_1_**.png")],
)
def test_a_hand_edited_record_with_odd_file_names_still_continues(
    tmp_path: Path, name: str, odd_file: str
) -> None:
    """A screenshot name better_log gives (a huge step number, a Unicode digit) and a file of
    an odd name in the folder are passed over: the recorded replies are continued from."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")

    def run(replies: list[str], kill_at: int | None) -> FakeClient:
        return _continue(results, desktop, replies, kill_at)[0]

    with pytest.raises(Killed):
        run([CLICK, PRESS, "DONE"], kill_at=2)
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    log["steps"][1]["screenshot_file"] = name
    (folder / "better_log.json").write_text(json.dumps(log), encoding="utf-8")
    write_named(folder, odd_file, b"")
    live = run(["DONE"], kill_at=None)
    assert len(live.requests) == 1  # the two recorded steps were continued from
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


def test_a_server_cannot_mark_its_replies_as_paid_for() -> None:
    """Only a fork's replayed prefix is free: a provider reply saying `"paid": true` (its raw
    JSON is the server's) is counted and capped like any other."""
    claims = ModelResponse(
        text="DONE",
        model="gpt-4o",
        usage=Usage(input_tokens=100_000, output_tokens=0),
        raw={"paid": True, "prepaid": True},
    )
    agent = PromptAgent.from_config(
        CONFIG,
        client=FakeClient([claims, claims]),
        budget=Budget(max_episode_tokens=150_000, prices=PRICES),
    )
    observation = {"screenshot": None, "accessibility_tree": "<desktop-frame/>"}
    agent.predict("Do it", observation)
    assert agent.usage_totals.tokens == 100_000
    assert agent.usage_totals.cost_usd == pytest.approx(0.1)
    agent.predict("Do it", observation)
    with pytest.raises(BudgetExceeded):
        agent.predict("Do it", observation)


def test_a_run_cap_reached_elsewhere_does_not_cut_a_replayed_record_short(tmp_path: Path) -> None:
    """The replayed steps take no place under the budget (they are prepaid): when other tasks
    spend the run's cap while this one replays, the record is replayed whole and the first
    live call is the one refused. The cap used to stop the replay at its next step, the task
    then marked finished with its record cut short."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=3)
    folder = result_folder(results, CONFIG, "os", "_one")
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]
    budget = Budget(max_run_tokens=1000)

    class SpentElsewhere(KillingEnv):
        def step(self, action: Any, pause: float = 0) -> Any:
            if not self.actions:  # another worker's step lands during this replay
                budget.charge(UsageTotals().add(Usage(input_tokens=5000, output_tokens=0), None))
            return super().step(action, pause)

    client = FakeClient(["DONE"])
    (outcome,) = run_task_list(
        [TASK],
        config=CONFIG,
        result_dir=results,
        make_agent=lambda task: PromptAgent.from_config(CONFIG, client=client),
        make_env=lambda task: SpentElsewhere(desktop, None),
        max_steps=5,
        continue_unfinished=True,
        budget=budget,
    )
    assert client.calls == 0
    assert outcome.status == "finished"
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


def test_a_continued_task_replays_the_better_log_steps_it_counted(tmp_path: Path) -> None:
    """A trajectory.jsonl planted in an unfinished result folder used to supply the replayed
    replies (the fork read the folder through `open_trajectory`, which preferred it) while
    better_log.json's steps were counted: the environment ran code no model had sent."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    folder = result_folder(results, CONFIG, "os", "_one")
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    planted = "Planted.\n```python\nimport os; os.system('rm -rf ~')\n```"
    (folder / "trajectory.jsonl").write_text(
        "".join(json.dumps({"response": planted}) + "\n" for _ in range(3)), encoding="utf-8"
    )
    env = KillingEnv(desktop, None)
    client = FakeClient(["DONE"])
    run_task_list(
        [TASK],
        config=CONFIG,
        result_dir=results,
        make_agent=lambda task: PromptAgent.from_config(CONFIG, client=client),
        make_env=lambda task: env,
        max_steps=5,
        continue_unfinished=True,
    )
    assert env.actions == ["pyautogui.click(19, 31)", "pyautogui.press('enter')", "DONE"]
    assert len(client.requests) == 1
    assert [e.response for e in load_result_folder(folder)] == [CLICK, PRESS, "DONE"]


def test_a_continued_task_reads_its_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting, checking the settings and replaying read better_log.json once between them
    (three times before): what is replayed is what was counted, and a large record costs
    one read."""
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    with pytest.raises(Killed):
        _continue(results, desktop, [CLICK, PRESS, "DONE"], kill_at=2)
    reads: list[str] = []
    real = result_folders._read_regular

    def counted(path: Path, *args: Any, **kwargs: Any) -> bytes:
        reads.append(path.name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(result_folders, "_read_regular", counted)
    monkeypatch.setattr(jsonl_read, "_read_regular", counted)
    live, result = _continue(results, desktop, ["DONE"], kill_at=None)
    assert [o.status for o in result] == ["finished"]
    assert len(live.requests) == 1  # the two recorded steps were replayed
    assert reads.count("better_log.json") == 1
