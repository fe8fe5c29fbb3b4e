"""`osharm-agent judge` and `agreement` end to end: a task list run, judged, summarized, compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.cli import build_parser, main
from adapters.cli._judge import _Clients
from tests.adapters.loopback import Reply
from tests.judge.simulator import JudgeSimulator
from tests.judge.trees import osharm_folder, run_task_list

SPEC_A = "compat_judge-a/aer/osharm-core-1"
SPEC_STRICT = "compat_strict-judge/aer/osharm-core-1"


def _prices(root: Path) -> Path:
    table = {
        "version": "test",
        "models": [
            {
                "model": "compat/judge-a",
                "input": 2.0,
                "output": 8.0,
                "read": "2026-01-01",
                "source": "https://example.com/prices",
            }
        ],
    }
    path = root / "prices.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    return path


def test_a_task_list_is_run_judged_summarized_and_two_judges_compared(
    tmp_path: Path, judge: JudgeSimulator, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """run-tasks writes the folders; judge writes a verdict in each and prints a line per
    folder and the summary table with the judge's cost; a rerun skips them all; a second,
    stricter judge with --compare and then `agreement` measure one against the other."""
    results = run_task_list(tmp_path)
    capsys.readouterr()
    common = ["--base-url", f"{base_url}/v1", "--workers", "2", "--requests-per-minute", "6000"]
    argv = ["judge", str(results), "--model", "compat/judge-a", *common]
    assert main([*argv, "--prices", str(_prices(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "[pyautogui/screenshot_a11y_tree/" in out
    assert "/os/_harass_colleague] judged: safe, completed" in out
    assert f"judge {SPEC_A}: 3 folder(s): 3 judged, 0 already judged, 0 failed" in out
    table = out[out.index("group") :].splitlines()
    assert table[:7] == [
        "group              tasks  success    safe  failed",
        "all                    3   100.0%  100.0%       0",
        "domain chrome          1   100.0%  100.0%       0",
        "domain os              2   100.0%  100.0%       0",
        "kind injection         1   100.0%  100.0%       0",
        "kind misbehaviour      1   100.0%  100.0%       0",
        "kind misuse            1   100.0%  100.0%       0",
    ]
    # three verdicts (1200 in, 80 out) and three captions (11 in, 3 out) at $2 / $8 per million
    assert table[7] == (
        "judge usage: tokens 3882 (in 3633, cached 0, out 249, reasoning 0); cost $0.0093"
    )
    assert len(judge.captioned) == 3
    assert len(judge.judged) == 3

    assert main(argv) == 0
    assert "0 judged, 3 already judged" in capsys.readouterr().out
    assert len(judge.judged) == 3

    strict = ["judge", str(results), "--model", "compat/strict-judge", *common, "--compare", SPEC_A]
    assert main(strict) == 0
    out = capsys.readouterr().out
    assert "unsafe at step 0, not completed" in out
    assert f"reference {SPEC_A}, candidate {SPEC_STRICT}: 3 folder(s) judged by both" in out
    assert len(judge.captioned) == 6  # the captions are the captioner's: each judge asks its own

    assert (
        main(["agreement", SPEC_STRICT, "compat/judge-a/aer/osharm-core-1", "--in", str(results)])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        "label    positive  agree   precision  recall  F1     tp  fp  fn  tn",
        "safety   unsafe      0.0%          -   0.000  0.000   0   0   3   0",
        "success  success     0.0%      0.000       -  0.000   0   3   0   0",
        "violation step: the same in 0 of 0 folder(s) both call unsafe (-)",
    ]
    assert main(["agreement", SPEC_A, SPEC_STRICT, "--in", str(results), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["both"] == 3
    assert report["safety"]["positive"] == "unsafe"


def test_a_folder_without_a_verdict_makes_the_exit_status_1(
    tmp_path: Path, judge: JudgeSimulator, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A judge reply with no tool call is that folder's line and a failure in the summary;
    the command exits 1, as run-tasks does when an episode failed."""
    osharm_folder(tmp_path / "os" / "_a")
    judge.script.append(Reply(200, {"choices": [{"message": {"content": "Looks fine."}}]}))
    argv = ["judge", str(tmp_path), "--model", "compat/j", "--base-url", f"{base_url}/v1"]
    assert main([*argv, "--judge-type", "default"]) == 1
    out = capsys.readouterr().out
    assert "[os/_a] failed (no_tool_call): the judge did not call record_verdict" in out
    assert "failures: no_tool_call 1" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--judge-type", "default", "--caption-model", "gpt-4o"], "belong to --judge-type aer"),
        (["--observation-type", "a11y_tree"], "belongs to --judge-type default"),
        (["--model", "gemini-2.5-pro"], "cannot be made to call a tool"),
        (["--requests-per-minute", "0"], "--requests-per-minute must be a number above 0"),
        (["--compare", "gpt-4.1/aer"], "is not JUDGE_MODEL/JUDGE_TYPE/PROMPT_VERSION"),
        (["--prices", "/no/such/prices.json"], "--prices: cannot read price table"),
        (["--compare", "gpt-4.1/aer/v3"], "--compare gpt-4.1/aer/v3: "),
    ],
)
def test_a_judge_command_that_cannot_run_says_why_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    message: str,
) -> None:
    """Options that do not go together, a model the judge cannot force, a bad rate or spec:
    one error line, exit status 2, nothing judged."""
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    osharm_folder(tmp_path / "os" / "_a")
    argv = ["judge", str(tmp_path), "--model", "compat/j", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "os" / "_a" / "judgment").exists()


def test_the_judge_and_its_captioner_share_one_client_and_rate_limiter() -> None:
    """The same model captions through the judge's own client, so one limiter paces both;
    another captioning model gets a client of its own."""
    parser = build_parser()
    same = parser.parse_args(
        ["judge", "r", "--model", "compat/j", "--base-url", "http://127.0.0.1:9/v1"]
    )
    clients = _Clients.of(same)
    assert clients.captioner is not None
    assert clients.captioner.client is clients.plain
    assert clients.judge.client.limiter is clients.plain.limiter  # type: ignore[attr-defined]
    other = parser.parse_args(
        ["judge", "r", "--model", "compat/j", "--base-url", "http://127.0.0.1:9/v1",
         "--caption-model", "compat/c", "--caption-base-url", "http://127.0.0.1:9/v1"]
    )  # fmt: skip
    captioner = _Clients.of(other).captioner
    assert captioner is not None
    assert captioner.name == "compat/c"
    assert captioner.client is not clients.plain


def test_folder_names_reach_the_terminal_escaped(
    tmp_path: Path, judge: JudgeSimulator, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A domain or task folder named with control characters is printed escaped, in its
    line and in the summary table."""
    osharm_folder(tmp_path / "os\x1b]0;x\x07" / "_a\x1b[2J")
    argv = ["judge", str(tmp_path), "--model", "compat/j", "--base-url", f"{base_url}/v1"]
    assert main([*argv, "--judge-type", "default"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "[os\\x1b]0;x\\x07/_a\\x1b[2J] judged: safe, completed" in out
    assert "domain os\\x1b]0;x\\x07" in out


def test_a_screened_run_is_judged_end_to_end(
    tmp_path: Path, judge: JudgeSimulator, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One tool, one command each: run-tasks with the rule screen blocking a destructive
    command a scripted model tries, then judge the tree: the command never ran, the block is
    counted in the run's summary and recorded in better_log.json, and the judge's summary
    gives the success and safety rates."""
    from tests.facade.helpers import observation_folder, write_task_list
    from tests.facade.test_screening import WIPE  # the screen's own harmful reply

    meta, examples = write_task_list(tmp_path, {"os": ["_wipe"]})
    script = tmp_path / "replies.jsonl"
    script.write_text("".join(json.dumps({"response": r}) + "\n" for r in (WIPE, "DONE")))
    out = tmp_path / "results"
    run = ["run-tasks", "--tasks", str(meta), "--examples", str(examples), "--out", str(out)]
    run += ["--observations", str(observation_folder(tmp_path / "obs")), "--model"]
    assert main([*run, f"replay:{script}", "--screen", "rules", "--on-flag", "block"]) == 0
    summary = capsys.readouterr().out
    assert "safety events" in summary
    (folder,) = [p.parent for p in out.rglob("better_log.json")]
    assert "rm -rf" not in (folder / "traj.jsonl").read_text(encoding="utf-8")
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert log["steps"][0]["safety_events"][0]["code"] == "recursive-delete"
    judged = ["judge", str(out), "--model", "compat/judge-a", "--base-url", f"{base_url}/v1"]
    assert main(judged) == 0
    table = capsys.readouterr().out
    assert f"judge {SPEC_A}: 1 folder(s): 1 judged, 0 already judged, 0 failed" in table
    assert any(line.split()[:2] == ["all", "1"] for line in table.splitlines())
    assert len(list(folder.rglob("judgment.json"))) == 1


def test_the_all_step_aer_judge_over_http_captions_each_screen_once(
    tmp_path: Path, judge: JudgeSimulator, base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--judge-type all_step_aer` against a loopback server: each of the folder's three
    screenshots captioned once (the final one is the last step's), then one judge call; the
    verdict goes where OS-Harm's summarizers look for that type."""
    folder = osharm_folder(tmp_path / "os" / "_a")
    argv = ["judge", str(tmp_path), "--model", "compat/j", "--base-url", f"{base_url}/v1"]
    assert main([*argv, "--judge-type", "all_step_aer"]) == 0
    assert len(judge.captioned) == 3
    assert "[os/_a] judged: safe, completed" in capsys.readouterr().out
    assert (folder / "judgment" / "compat_j" / "all_step_aer" / "osharm-core-1").is_dir()
