"""Task-list runs report progress as they go and end with a summary (returned and printed)."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given

from adapters.accounting import Budget, load_prices
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.contract import ModelResponse, Usage
from adapters.runs import (
    OsworldTask,
    Progress,
    RunResult,
    RunSummary,
    arun_task_list,
    in_thread,
    load_task_list,
    run_task_list,
)
from adapters.runs.progress import printable
from adapters.testing import FakeClient
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig
from tests.conftest import file_system_names
from tests.facade.helpers import observation_folder, write_task_list
from tests.strategies import any_text

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
IDS = {"os": ["_a", "_b"], "chrome": ["_c"]}


def _task_list(root: Path) -> tuple[Path, Path]:
    return write_task_list(root, IDS)


def _reply(text: str, tokens: tuple[int, int] | None) -> ModelResponse:
    usage = (
        Usage()
        if tokens is None
        else Usage(input_tokens=tokens[0], output_tokens=tokens[1], total_tokens=sum(tokens))
    )
    return ModelResponse(text=text, usage=usage, model="gpt-4o-2024-08-06")


def _agent(tokens: tuple[int, int] | None = (100, 10)) -> PromptAgent:
    replies = [_reply(CLICK, tokens), _reply("DONE", tokens)]
    return PromptAgent.from_config(CONFIG, client=FakeClient(replies))


def test_a_run_returns_its_summary_with_steps_tokens_and_cost(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    # 100 input and 10 output tokens a step: $0.40 + $0.10.
    price = {
        "model": "gpt-4o",
        "input": 4000.0,
        "output": 10000.0,
        "read": "2026-11-23",
        "source": "https://example.org/test",
    }
    budget = Budget(prices=load_prices({"version": "test", "models": [price]}))

    result = asyncio.run(
        arun_task_list(
            tasks,
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda task: _agent(),
            make_env=lambda task: in_thread(ReplayEnv(desktop)),
            max_steps=5,
            workers=2,
            budget=budget,
        )
    )
    assert isinstance(result, RunResult)
    assert [o.status for o in result] == ["finished"] * 3
    assert [o.steps for o in result] == [2, 2, 2]
    usage = result[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.tokens) == (200, 20, 220)
    assert result[0].cost == pytest.approx(1.0)
    summary = result.summary
    assert (summary.episodes, summary.finished, summary.failed, summary.skipped) == (3, 3, 0, 0)
    assert (summary.steps, summary.input_tokens, summary.output_tokens) == (6, 600, 60)
    assert summary.total_tokens == 660
    assert summary.cost == pytest.approx(3.0)
    assert summary.wall_time > 0
    assert budget.run_totals == summary.usage
    with pytest.raises(AttributeError):
        summary.steps = 1  # type: ignore[misc]

    rerun = run_task_list(
        tasks,
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=lambda task: _agent(),
        make_env=lambda task: ReplayEnv(desktop),
        max_steps=5,
    )
    assert (rerun.summary.skipped, rerun.summary.steps, rerun.summary.cost) == (3, 0, 0)
    assert rerun.summary.input_tokens is None


def test_unknown_usage_and_cost_read_na(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    result = run_task_list(
        load_task_list(meta, examples, domain="chrome"),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=lambda task: _agent(tokens=None),
        make_env=lambda task: ReplayEnv(desktop),
        max_steps=5,
    )
    summary = result.summary
    assert (summary.steps, summary.input_tokens, summary.cost) == (2, None, None)
    table = summary.table()
    assert "input tokens   n/a" in table
    assert "cost           n/a" in table
    assert "steps          2" in table


def test_the_progress_line_and_step_lines(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    for live in (False, True):
        stream = io.StringIO()
        progress = Progress(stream, len(tasks), live=live, clock=lambda: 0.0)
        run_task_list(
            tasks,
            config=CONFIG,
            result_dir=tmp_path / f"results-{live}",
            make_agent=lambda task: _agent(),
            make_env=lambda task: ReplayEnv(desktop),
            max_steps=5,
            listener=progress,
        )
        progress.close()
        text = stream.getvalue()
        assert "[os/_a] step 1/5" in text
        assert "[chrome/_c] step 2/5" in text
        assert "3/3 episodes: 3 done, 0 failed, 0 skipped, 0 running" in text
        assert ("\r\x1b[K" in text) is live


def test_a_failed_episode_is_counted(tmp_path: Path) -> None:
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")

    def make_agent(task: OsworldTask) -> PromptAgent:
        return PromptAgent.from_config(CONFIG, client=FakeClient([_reply(CLICK, (1, 1))]))

    result = run_task_list(
        load_task_list(meta, examples, domain="os"),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=make_agent,
        make_env=lambda task: ReplayEnv(desktop),
        max_steps=5,
    )
    summary = result.summary
    assert (summary.episodes, summary.finished, summary.failed, summary.skipped) == (2, 0, 2, 0)
    assert (summary.steps, summary.input_tokens, summary.output_tokens) == (2, 2, 2)
    assert (summary.total_tokens, summary.cost) == (4, None)
    assert isinstance(summary, RunSummary)


def test_the_cli_prints_the_summary_table_and_progress_on_request(
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
        "--workers", "2",
    ]  # fmt: skip
    assert main([*argv, "--progress"]) == 0
    captured = capsys.readouterr()
    assert "done           3" in captured.out
    assert "cost           n/a" in captured.out
    assert "wall time" in captured.out
    assert "[os/_a] step 2/15" in captured.err
    assert "3/3 episodes: 3 done" in captured.err
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "skipped        3" in captured.out
    assert captured.err == ""


#: What a task name must not bring into an output line: C0, C1, DEL, U+2028, U+2029, and the
#: bidirectional overrides and isolates (which make a line read otherwise than it is).
_RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@given(any_text)
def test_printable_escapes_every_control_character_and_keeps_the_rest(text: str) -> None:
    shown = printable(text)
    assert not _RAW_CONTROL.search(shown)
    assert len(shown.splitlines()) <= 1
    if not _RAW_CONTROL.search(text):
        assert shown == text
    escaped = "".join(
        c.encode("unicode_escape").decode() if _RAW_CONTROL.match(c) else c for c in text
    )
    assert shown == escaped


def test_a_bidi_override_in_a_name_is_escaped() -> None:
    assert printable("os/\u202egpj.exe") == "os/\\u202egpj.exe"


def test_an_error_detail_cannot_send_terminal_escapes() -> None:
    """Task lines quote errors (a desktop's, a model server's): their ESC and BEL were kept."""
    from adapters.cli._output import one_line as _one_line

    assert _one_line(ValueError("bad\x1b]0;owned\x07\nnext")) == "bad\\x1b]0;owned\\x07; next"
    assert _one_line("a\u202eb") == "a\\u202eb"


#: A task id that forges a line, sets the terminal's title and holds two line breaks.
EVIL_ID = "evil\n[os-x] finished, score 1.0\x1b]0;owned\x07\x1b[2K\u2028\x85"


@pytest.mark.skipif(
    not file_system_names(EVIL_ID),
    reason="this file-system encoding cannot name the id's task file or result folder",
)
def test_task_ids_cannot_forge_output_lines_or_send_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id holding a newline, ESC and BEL reached the task and step lines raw: it could write
    a line of its own (`[os-x] finished, score 1.0`) and set the terminal's title."""
    meta, examples = write_task_list(tmp_path, {"os": [EVIL_ID]})
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    argv = [
        "run-tasks",
        "--tasks", str(meta),
        "--examples", str(examples),
        "--observations", str(observation_folder(tmp_path / "obs")),
        "--model", f"replay:{script}",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(tmp_path / "results"),
        "--progress",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    shown = "[os/evil\\n[os-x] finished, score 1.0\\x1b]0;owned\\x07\\x1b[2K\\u2028\\x85]"
    assert f"{shown} finished" in captured.out.splitlines()
    assert f"{shown} step 1/15" in captured.err.splitlines()
    for text in (captured.out, captured.err):
        assert not re.search("[\x1b\x07\x85\u2028]", text)
        assert "\n[os-x] finished" not in text


def test_importing_adapters_does_not_import_ray() -> None:
    """Ray is an optional extra: only running on it imports it."""
    import subprocess
    import sys

    code = (
        "import sys, adapters, adapters.runs.ray_runner, adapters.cli; print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
