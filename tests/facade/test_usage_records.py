"""Usage and cost in trajectory lines and in `osharm-agent run`: new fields only when known, old lines still read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.accounting import recorded_totals
from adapters.cli import main
from adapters.contract import Usage
from adapters.trajectories.jsonl import TrajectoryEntry, parse_entry, read_trajectory
from tests.adapters.loopback import LoopbackServer
from tests.adapters.provider_routes import install
from tests.facade.helpers import observation_folder, write_task_list
from tests.strategies import trajectory_entries

INSTRUCTION = ["--instruction", "Open the File menu"]
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


# --- trajectory lines ---------------------------------------------------------------


@given(
    trajectory_entries(),
    st.none() | st.integers(0, 10_000),
    st.none() | st.integers(0, 10_000),
    st.none() | st.floats(0, 1000, allow_nan=False),
    st.none() | st.text(min_size=1, max_size=40),
)
def test_round_trip_with_and_without_the_new_fields(
    entry: TrajectoryEntry,
    cached: int | None,
    reasoning: int | None,
    cost: float | None,
    budget: str | None,
) -> None:
    """An entry survives JSON with or without cached/reasoning tokens, a cost and a budget note."""
    usage = attrs.evolve(entry.usage, cached_input_tokens=cached, reasoning_tokens=reasoning)
    full = attrs.evolve(entry, usage=usage, cost_usd=cost, budget_exceeded=budget)
    line = json.dumps(full.to_json())
    assert parse_entry(line, full.step).unwrap() == full
    written = json.loads(line)
    assert ("cached_input_tokens" in written["usage"]) == (cached is not None)
    assert ("reasoning_tokens" in written["usage"]) == (reasoning is not None)
    assert ("cost_usd" in written) == (cost is not None)
    assert ("budget_exceeded" in written) == bool(budget)


def test_an_entry_without_the_new_fields_writes_what_it_wrote_before() -> None:
    """No cached/reasoning counts, no cost: the line has exactly the keys older versions wrote."""
    entry = TrajectoryEntry(
        step=1, response="DONE", usage=Usage(input_tokens=1, output_tokens=2, total_tokens=3)
    )
    written = entry.to_json()
    assert written["usage"] == {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
    assert not {"cost_usd", "budget_exceeded"} & set(written)


def test_an_old_line_reads_with_the_new_fields_unknown() -> None:
    old = '{"step": 2, "response": "DONE", "usage": {"input_tokens": 5, "output_tokens": 1}}'
    entry = parse_entry(old).unwrap()
    assert entry.usage == Usage(input_tokens=5, output_tokens=1)
    assert (entry.cost_usd, entry.budget_exceeded) == (None, None)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"response": "x", "cost_usd": -1}', "'cost_usd' must be a number >= 0"),
        ('{"response": "x", "cost_usd": "0.1"}', "'cost_usd' must be a number >= 0"),
        ('{"response": "x", "cost_usd": true}', "'cost_usd' must be a number >= 0"),
        ('{"response": "x", "usage": {"reasoning_tokens": 1.5}}', "usage.reasoning_tokens"),
        ('{"response": "x", "usage": {"cached_input_tokens": "7"}}', "usage.cached_input_tokens"),
        ('{"response": "x", "budget_exceeded": 3}', "'budget_exceeded' must be str"),
    ],
)
def test_bad_new_fields_are_clear_failures(line: str, words: str) -> None:
    assert words in parse_entry(line).failure()


# --- the CLI ------------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _replay_script(path: Path, tokens: tuple[int, int], count: int) -> str:
    line = {"response": CLICK, "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}
    path.write_text((json.dumps(line) + "\n") * count, encoding="utf-8")
    return f"replay:{path}"


def test_run_ends_an_episode_at_the_token_cap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """60 tokens a step and a cap of 100: two steps recorded, the summary says the budget ended it."""
    folder = observation_folder(tmp_path / "task")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 3)
    code, out, err = _run(
        capsys, "run", str(folder), "--model", model, "--out", str(tmp_path / "o"),
        "--max-episode-tokens", "100", *INSTRUCTION,
    )  # fmt: skip
    assert (code, err) == (0, "")
    summary = out.splitlines()[-1]
    assert "2 step(s), ended early: episode budget exceeded: 120 tokens used, cap 100" in summary
    entries = read_trajectory(tmp_path / "o")
    assert len(entries) == 2
    assert entries[-1].budget_exceeded == "episode budget exceeded: 120 tokens used, cap 100"


def test_run_refuses_a_dollar_cap_it_cannot_keep(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = observation_folder(tmp_path / "task")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 3)
    code, out, err = _run(
        capsys, "run", str(folder), "--model", model, "--out", str(tmp_path / "o"),
        "--max-run-cost", "1", *INSTRUCTION,
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err.startswith("osharm-agent: error: a dollar cap needs a price for 'replay:")
    assert "--prices FILE" in err
    assert not (tmp_path / "o").exists()


def test_the_refusal_s_suggestion_works_for_a_prefixed_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The entry the message asks for (the model name exactly, here `replay:PATH`) is priced."""
    folder = observation_folder(tmp_path / "task")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 3)
    argv = ["run", str(folder), "--model", model, "--max-run-cost", "1", *INSTRUCTION]
    code, _, err = _run(capsys, *argv, "--out", str(tmp_path / "o"))
    assert code == 2
    asked = re.search(r'"model" is (".*?") ', err)
    assert asked is not None
    entry = {"model": json.loads(asked.group(1)), "input": 3.0, "output": 15.0}
    entry.update(read="2026-11-23", source="https://example.org/mine")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"version": "mine", "models": [entry]}), encoding="utf-8")
    code, out, err = _run(capsys, *argv, "--prices", str(prices), "--out", str(tmp_path / "p"))
    assert (code, err) == (0, "")
    assert "cost $0.0009" in out.splitlines()[-1]  # 3 x (50 x $3 + 10 x $15) per million


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--max-episode-tokens", "0", "--max-episode-tokens must be > 0"),
        ("--max-run-cost", "-2", "--max-run-cost must be > 0"),
        ("--prices", "missing.json", "cannot read price table missing.json"),
    ],
)
def test_run_reports_bad_budget_options_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, value: str, words: str
) -> None:
    folder = observation_folder(tmp_path / "task")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 3)
    code, _, err = _run(
        capsys, "run", str(folder), "--model", model, "--out", str(tmp_path / "o"),
        option, value, *INSTRUCTION,
    )  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1
    assert words in err


def test_run_shows_cost_against_a_priced_model_on_a_loopback_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claude-sonnet-4-5 is priced: each step line and the summary show the cost; a dollar cap holds."""
    monkeypatch.setenv("LOOPBACK_KEY", "sk-loopback-test-key")
    folder = observation_folder(tmp_path / "task")
    with LoopbackServer() as server:
        install(server)
        code, out, err = _run(
            capsys, "run", str(folder), "--model", "claude-sonnet-4-5",
            "--base-url", server.base_url, "--api-key-env", "LOOPBACK_KEY",
            "--out", str(tmp_path / "o"), "--max-episode-cost", "0.0002", *INSTRUCTION,
        )  # fmt: skip
        sent = len(server.requests)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split(":")[0] == "[task] step 1"
    assert "tokens in 21 out 4, cost $0.0001" in lines[0]
    assert "ended early: episode budget exceeded: $0.0002 spent, cap $0.0002" in lines[-1]
    assert "tokens in 42 out 8; cost $0.0002" in lines[-1]
    assert sent == 2
    assert [e.cost_usd for e in read_trajectory(tmp_path / "o")] == [0.000123, 0.000123]


def test_a_forks_replayed_steps_add_nothing_to_the_totals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary added the replayed step's local estimate to the live counts (and dropped the
    `~`, and hid the live output tokens behind `-`), and `recorded_totals` counted the replayed
    line as a step of unknown cost; both now leave it out, as `usage_totals` does."""
    monkeypatch.setenv("LOOPBACK_KEY", "sk-loopback-test-key")
    example = Path(__file__).resolve().parents[2] / "examples" / "task"
    out_dir = tmp_path / "o"
    with LoopbackServer() as server:
        install(server)
        code, out, err = _run(
            capsys, "run", str(example), "--fork", str(example / "trajectory.jsonl"), "--at", "1",
            "--model", "claude-sonnet-4-5", "--base-url", server.base_url,
            "--api-key-env", "LOOPBACK_KEY", "--out", str(out_dir), "--max-steps", "2",
        )  # fmt: skip
    assert (code, err) == (0, ""), out
    first, second, summary = out.splitlines()
    assert re.search(r"tokens in ~\d+ out - \(replayed: not counted\)", first), first
    assert "tokens in 21 out 4, cost $0.0001" in second
    assert "; tokens in 21 out 4; cost $0.0001; " in summary
    totals = recorded_totals(read_trajectory(out_dir))
    assert (totals.steps, totals.tokens, totals.unpriced_steps) == (1, 25, 0)
    assert totals.cost_usd == pytest.approx(0.000123)


def test_a_replay_models_recorded_usage_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A `replay:` model stands in for a model: its lines carry `replayed_from` too, and count."""
    folder = observation_folder(tmp_path / "task")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 2)
    code, out, _ = _run(
        capsys, "run", str(folder), "--model", model, "--out", str(tmp_path / "o"),
        "--max-steps", "2", *INSTRUCTION,
    )  # fmt: skip
    assert code == 0
    assert "; tokens in 100 out 20; " in out.splitlines()[-1]
    entries = read_trajectory(tmp_path / "o")
    assert all(e.replayed_from for e in entries)
    assert recorded_totals(entries).tokens == 120


def test_a_summary_with_an_estimate_in_it_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One reply with usage and one without: the input sum holds an estimate, so `~` before it."""
    folder = observation_folder(tmp_path / "task")
    script = tmp_path / "r.jsonl"
    lines = [{"response": CLICK, "usage": {"input_tokens": 50, "output_tokens": 10}}]
    lines.append({"response": CLICK})
    script.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code, out, _ = _run(
        capsys, "run", str(folder), "--model", f"replay:{script}", "--out", str(tmp_path / "o"),
        "--max-steps", "2", *INSTRUCTION,
    )  # fmt: skip
    assert code == 0
    assert re.search(r"; tokens in ~\d+ out -; ", out.splitlines()[-1])


def test_a_task_list_run_stops_at_the_run_cap_and_reports_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--max-run-tokens: the task that reaches it ends early, later ones are not started."""
    meta, _ = write_task_list(tmp_path, {"os": ["_a", "_b", "_c"]})
    desktop = observation_folder(tmp_path / "obs")
    model = _replay_script(tmp_path / "r.jsonl", (50, 10), 3)
    code, out, err = _run(
        capsys, "run-tasks", "--tasks", str(meta), "--examples", str(tmp_path / "examples"),
        "--observations", str(desktop), "--model", model, "--out", str(tmp_path / "results"),
        "--observation-type", "a11y_tree", "--max-steps", "2", "--max-run-tokens", "60",
    )  # fmt: skip
    assert (code, err) == (0, "")
    reason = "run budget exceeded: 60 tokens used, cap 60"
    assert out.splitlines()[:4] == [
        f"[os/_a] finished: ended early: {reason}",
        f"[os/_b] stopped: {reason}",
        f"[os/_c] stopped: {reason}",
        "summary: 3 task(s): 1 finished, 0 skipped (already finished), 0 failed, "
        "2 not started (run budget); tokens 60 (in 50, cached 0, out 10, reasoning 0); "
        "cost unknown (no price for this model)",
    ]
    traj = tmp_path / "results" / "pyautogui" / "a11y_tree"
    assert len(list(traj.rglob("better_log.json"))) == 1
