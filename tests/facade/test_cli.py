"""osharm-agent: every command on real observations, in-process through main(argv), and clean failures."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from adapters.cli import main
from adapters.trajectories.jsonl import read_trajectory
from osharm_core import AgentConfig, AgentState
from osharm_core.accessibility import linearize_accessibility_tree
from osharm_core.step import prepare_step
from osharm_core.tokens import cl100k_encoding, trim_accessibility_tree
from tests.conftest import OBSERVATIONS
from tests.facade.helpers import observation_folder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"
NOTES_PNG = OBSERVATIONS / "mousepad_notes.png"
NOTES_XML = OBSERVATIONS / "mousepad_notes.xml"
INSTRUCTION = ["--instruction", "Open the File menu"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _script(path: Path, *replies: str) -> str:
    """A hand-written replay file with these replies; returns the `replay:` model name."""
    path.write_text("".join(json.dumps({"response": r}) + "\n" for r in replies), encoding="utf-8")
    return f"replay:{path}"


def _fails_cleanly(code: int, out: str, err: str, expected: int, *words: str) -> None:
    assert code == expected
    assert err.count("\n") == 1, err
    assert err.startswith("osharm-agent: error: ")
    assert "Traceback" not in err
    for word in words:
        assert word in err


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach a real provider: the keys are unset."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("command", [[], ["predict"], ["render"], ["run"], ["replay"]])
def test_help_on_every_command(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """`--help` prints usage and exits 0 for the program and each command."""
    code, out, _ = _run(capsys, *command, "--help")
    assert code == 0
    assert out.startswith("usage: osharm-agent")


def test_bad_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown option or a bad choice is one line on stderr and exit status 2."""
    code, out, err = _run(capsys, "render", str(EXAMPLE), "--observation-type", "video")
    _fails_cleanly(code, out, err, 2, "--observation-type")
    code, out, err = _run(capsys)
    _fails_cleanly(code, out, err, 2, "COMMAND")


# --- predict -----------------------------------------------------------------------


def test_predict_on_the_example_task(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """predict prints the reply, then the actions, for the first observation of a directory."""
    model = _script(tmp_path / "r.jsonl", "Opening.\n```python\npyautogui.click(19, 31)\n```")
    code, out, err = _run(capsys, "predict", str(EXAMPLE), "--model", model)
    assert (code, err) == (0, "")
    assert (
        out
        == "Opening.\n```python\npyautogui.click(19, 31)\n```\n--- actions ---\npyautogui.click(19, 31)\n"
    )


def test_predict_json_from_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--screenshot/--a11y name the files; --json prints the reply, actions, usage, tries and latency."""
    model = _script(
        tmp_path / "r.jsonl", '```json\n{"action_type": "CLICK", "x": 19, "y": 31}\n```'
    )
    code, out, _ = _run(
        capsys,
        "predict",
        "--screenshot",
        str(NOTES_PNG),
        "--a11y",
        str(NOTES_XML),
        "--observation-type",
        "screenshot_a11y_tree",
        "--action-space",
        "computer_13",
        "--model",
        model,
        "--json",
        *INSTRUCTION,
    )
    assert code == 0
    result = json.loads(out)
    assert result["actions"] == [{"action_type": "CLICK", "x": 19, "y": 31}]
    assert (result["tries"], result["context_fallback"]) == (1, False)
    assert set(result) == {
        "response",
        "actions",
        "model",
        "usage",
        "tries",
        "context_fallback",
        "latency",
    }


def test_predict_unparsable_reply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An unparsable computer_13 reply says so instead of printing actions."""
    model = _script(tmp_path / "r.jsonl", "no json here")
    code, out, _ = _run(
        capsys,
        "predict",
        str(NOTES_XML),
        "--action-space",
        "computer_13",
        "--model",
        model,
        *INSTRUCTION,
    )
    assert code == 0
    assert "could not be parsed" in out


# --- render ------------------------------------------------------------------------


def test_render_shows_messages_and_token_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """render prints each message with its cl100k token count and the total; it needs no key."""
    code, out, err = _run(capsys, "render", str(NOTES_XML), *INSTRUCTION)
    assert (code, err) == (0, "")
    tree = trim_accessibility_tree(
        linearize_accessibility_tree(NOTES_XML.read_text("utf-8")), 10000
    )
    assert tree in out
    encoding = cl100k_encoding()
    config = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
    observation = {"accessibility_tree": NOTES_XML.read_text("utf-8")}
    messages = prepare_step(config, AgentState(), "Open the File menu", observation).messages
    expected = [len(encoding.encode(m.text, disallowed_special=())) for m in messages]
    counts = [
        int(line.split("(")[1].split()[0]) for line in out.splitlines() if line.startswith("=== [")
    ]
    assert counts == expected
    assert f"=== total: {sum(expected)} tokens in 2 messages" in out


def test_client_password_is_the_one_the_prompt_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "render", str(NOTES_XML), *INSTRUCTION)
    assert code == 0
    assert "the sudo password is asked for, it is `password`" in out
    assert "hunter2" not in out
    code, out, _ = _run(
        capsys, "render", str(NOTES_XML), *INSTRUCTION, "--client-password", "hunter2"
    )
    assert code == 0
    assert "the sudo password is asked for, it is `hunter2`" in out
    assert "it is `password`" not in out


def test_render_shows_images_as_size_and_hash(capsys: pytest.CaptureFixture[str]) -> None:
    """Images are shown as media type, pixel size, byte size and sha256, never as data."""
    code, out, _ = _run(
        capsys, "render", str(NOTES_PNG), "--observation-type", "screenshot", *INSTRUCTION
    )
    assert code == 0
    png = NOTES_PNG.read_bytes()
    digest = hashlib.sha256(png).hexdigest()
    assert f"<image image/png, 1920x1080, {len(png)} bytes, sha256 {digest}>" in out
    assert base64.b64encode(png[:30]).decode()[:20] not in out


def test_render_json_is_the_wire_shape_without_image_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--json prints the OpenAI chat messages with each image URL replaced by its description."""
    code, out, _ = _run(
        capsys,
        "render",
        str(NOTES_PNG),
        "--observation-type",
        "screenshot_a11y_tree",
        "--json",
        *INSTRUCTION,
    )
    assert code == 0
    result = json.loads(out)
    user = result["messages"][1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url"]
    assert user["content"][1]["image_url"]["url"].startswith("<image image/png, 1920x1080")
    assert user["content"][1]["image_url"]["detail"] == "high"
    assert result["total_tokens"] == sum(result["tokens"])


def test_render_som_writes_the_tagged_screenshot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """For som, --som-out writes the tagged PNG the model would see."""
    target = tmp_path / "som.png"
    code, out, _ = _run(
        capsys,
        "render",
        str(NOTES_PNG),
        "--observation-type",
        "som",
        "--som-out",
        str(target),
        *INSTRUCTION,
    )
    assert code == 0
    assert target.read_bytes().startswith(b"\x89PNG")
    assert target.read_bytes() != NOTES_PNG.read_bytes()
    assert f"written to {target}" in out


def test_render_reads_the_instruction_from_task_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --instruction, a directory's task.json gives the task."""
    code, out, _ = _run(capsys, "render", str(EXAMPLE))
    assert code == 0
    instruction = json.loads((EXAMPLE / "task.json").read_text("utf-8"))["instruction"]
    assert f"You are asked to complete the following task: {instruction}" in out


# --- clean failures ------------------------------------------------------------------


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A missing screenshot, tree or observation path is one line and exit status 2."""
    code, out, err = _run(capsys, "render", "--a11y", str(tmp_path / "nope.xml"), *INSTRUCTION)
    _fails_cleanly(code, out, err, 2, "no such file", "nope.xml")
    code, out, err = _run(capsys, "render", str(tmp_path / "nothing"), *INSTRUCTION)
    _fails_cleanly(code, out, err, 2, "no such observation")


def test_bad_xml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A tree that is not well-formed XML is one line and exit status 2."""
    bad = tmp_path / "bad.xml"
    bad.write_text("<desktop-frame><application name='x'></desktop-frame>", encoding="utf-8")
    code, out, err = _run(capsys, "render", str(bad), *INSTRUCTION)
    _fails_cleanly(code, out, err, 2)


def test_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown model name is one line naming it, and exit status 2."""
    code, out, err = _run(capsys, "predict", str(EXAMPLE), "--model", "mystery-9000")
    _fails_cleanly(code, out, err, 2, "mystery-9000")


def test_missing_key(capsys: pytest.CaptureFixture[str]) -> None:
    """A known model without its key names the variable to set, exit status 2."""
    code, out, err = _run(capsys, "predict", str(EXAMPLE), "--model", "gpt-4o")
    _fails_cleanly(code, out, err, 2, "OPENAI_API_KEY")
    # The CLI's options, not the library's keyword arguments (it has no api_key=...).
    assert "set OPENAI_API_KEY or pass --api-key-env VAR" in err
    assert "api_key=" not in err
    code, out, err = _run(capsys, "predict", str(EXAMPLE), "--model", "compat/llama3")
    _fails_cleanly(code, out, err, 2, "needs a base URL: pass --base-url URL")
    assert "base_url=" not in err
    code, out, err = _run(capsys, "predict", str(EXAMPLE), "--model", "mystery-9000")
    assert "compat/<model> (--base-url URL required; key optional)" in err
    assert "base_url=" not in err
    code, out, _ = _run(capsys, "predict", "--help")
    assert "compat/<model> (--base-url URL required; key optional)" in out
    code, out, err = _run(
        capsys,
        "predict",
        str(EXAMPLE),
        "--model",
        "compat/llama3",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--api-key-env",
        "OSHARM_TEST_UNSET",
    )
    _fails_cleanly(code, out, err, 2, "OSHARM_TEST_UNSET")


def test_model_failure_exits_with_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A model call that fails (here a replay with no reply left) is one line and exit status 1."""
    model = _script(tmp_path / "r.jsonl", "x")
    runs = tmp_path / "runs"
    code, out, _ = _run(
        capsys, "run", str(EXAMPLE), "--model", model, "--out", str(runs), "--max-steps", "3"
    )
    assert code == 1
    assert "model call failed" in out
    assert len(read_trajectory(runs)) == 1


# --- run and replay --------------------------------------------------------------------


def test_run_records_progress_and_summary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """run prints one progress line per step and a summary, and records every step."""
    model = f"replay:{EXAMPLE / 'trajectory.jsonl'}"
    code, out, err = _run(
        capsys, "run", str(EXAMPLE), "--model", model, "--out", str(tmp_path / "o")
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "[task] step 1",
        "[task] step 2",
        "summary [task]",
    ]
    assert "tokens in ~" in lines[0]
    assert "latency" in lines[0]
    assert "2 step(s), ended with DONE" in lines[2]
    assert len(read_trajectory(tmp_path / "o")) == 2


def test_run_resumes_skipping_a_finished_task_and_overwrite_runs_it_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same command again resumes: a finished task is skipped (its trajectory kept), an
    unfinished one redone; --overwrite runs a finished one again."""
    model = f"replay:{EXAMPLE / 'trajectory.jsonl'}"
    args = ["run", str(EXAMPLE), "--model", model, "--out", str(tmp_path / "o")]
    assert _run(capsys, *args)[0] == 0
    trajectory = (tmp_path / "o" / "trajectory.jsonl").read_bytes()
    code, out, err = _run(capsys, *args)
    assert (code, err) == (0, "")
    assert "0 step(s), skipped: already finished (--overwrite runs it again)" in out
    assert (tmp_path / "o" / "trajectory.jsonl").read_bytes() == trajectory
    (tmp_path / "o" / "finished.json").unlink()  # as a run stopped part-way leaves it
    code, out, _ = _run(capsys, *args)
    assert code == 0
    assert out.splitlines()[-1].startswith("summary [task]: 2 step(s), ended with DONE;")
    assert len((tmp_path / "o" / "trajectory.jsonl").read_bytes().splitlines()) == 2
    code, out, _ = _run(capsys, *args, "--overwrite")
    assert code == 0
    assert "2 step(s), ended with DONE" in out


def test_run_several_tasks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Several task directories each get a subdirectory of --out and a summary line."""
    first = observation_folder(tmp_path / "first", ("mousepad_notes",))
    second = observation_folder(tmp_path / "second", ("xfce4_terminal_shell", "mousepad_notes"))
    model = _script(tmp_path / "r.jsonl", "DONE", "WAIT", "FAIL")
    code, out, _ = _run(
        capsys,
        "run",
        str(first),
        str(second),
        "--model",
        model,
        "--out",
        str(tmp_path / "o"),
        *INSTRUCTION,
    )
    assert code == 0
    assert [e.response for e in read_trajectory(tmp_path / "o" / "first")] == ["DONE"]
    assert [e.response for e in read_trajectory(tmp_path / "o" / "second")] == ["DONE"]
    assert "summary [second]" in out


@pytest.mark.parametrize("form", ["jsonl", "osharm"])
def test_an_unreadable_observation_fails_its_task_and_the_next_task_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: str
) -> None:
    """A desktop that gives a broken tree mid-episode ends that task as failed (exit 1),
    naming the observation; the other task directories still run."""
    first = observation_folder(tmp_path / "first", ("mousepad_notes", "mousepad_file_menu"))
    (first / "02_mousepad_file_menu.xml").write_text("<r><unclosed></r>", encoding="utf-8")
    second = observation_folder(tmp_path / "second", ("mousepad_notes",))
    click = "```python\npyautogui.click(19, 31)\n```"
    model = _script(tmp_path / "r.jsonl", click, "DONE")
    argv = ["run", str(first), str(second), "--model", model, "--out", str(tmp_path / "o")]
    code, out, err = _run(capsys, *argv, "--format", form, *INSTRUCTION)
    assert code == 1
    assert "Traceback" not in err
    assert "[first] " in out
    assert "observation 02_mousepad_file_menu unreadable: accessibility tree" in out
    assert "[second] " in out


def test_replay_reports_no_difference_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled trajectory re-parses to its recorded actions: exit 0."""
    code, out, _ = _run(capsys, "replay", str(EXAMPLE / "trajectory.jsonl"))
    assert code == 0
    assert out.endswith("2 step(s) replayed, 0 differ\n")


def test_replay_reports_where_actions_differ(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A step whose recorded actions differ from today's parse is reported, and the exit status is 1."""
    lines = (EXAMPLE / "trajectory.jsonl").read_text("utf-8").splitlines()
    changed = json.loads(lines[1])
    changed["actions"] = ["pyautogui.click(1, 1)"]
    (tmp_path / "trajectory.jsonl").write_text(
        lines[0] + "\n" + json.dumps(changed) + "\n", encoding="utf-8"
    )
    code, out, _ = _run(capsys, "replay", str(tmp_path))
    assert code == 1
    assert "step 2: DIFFERS" in out
    code, out, _ = _run(capsys, "replay", str(tmp_path), "--json")
    assert json.loads(out)["differences"][0]["recorded"] == ["pyautogui.click(1, 1)"]


def test_replay_of_a_malformed_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A malformed trajectory is one line naming the line number, exit status 2."""
    (tmp_path / "trajectory.jsonl").write_text("{oops\n", encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(tmp_path))
    _fails_cleanly(code, out, err, 2, "line 1")


# --- the README's main job --------------------------------------------------------------


def test_readme_main_job_runs_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`osharm-agent run examples/task --model replay:examples/task/trajectory.jsonl --out runs/demo` works as written."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    argv = "run examples/task --model replay:examples/task/trajectory.jsonl --out runs/demo".split()  # noqa: SIM905
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, "")
    assert "ended with DONE" in out
    assert (tmp_path / "runs" / "demo" / "trajectory.jsonl").exists()


def test_a_run_replays_to_the_same_actions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The trajectory `run` writes re-parses to its own actions, which are the bundled recording's, and runs again the same."""
    first, second = tmp_path / "first", tmp_path / "second"
    bundled = read_trajectory(EXAMPLE)
    assert (
        _run(capsys, "run", str(EXAMPLE), "--model", f"replay:{EXAMPLE}", "--out", str(first))[0]
        == 0
    )
    code, out, _ = _run(capsys, "replay", str(first))
    assert (code, out.splitlines()[-1]) == (0, "2 step(s) replayed, 0 differ")
    assert [e.actions for e in read_trajectory(first)] == [e.actions for e in bundled]
    assert (
        _run(capsys, "run", str(EXAMPLE), "--model", f"replay:{first}", "--out", str(second))[0]
        == 0
    )
    assert [e.actions for e in read_trajectory(second)] == [e.actions for e in bundled]


def test_several_recorded_tasks_replay_task_by_task(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`replay:DIR` over a several-task recording gives each task its own recorded replies back."""
    first = observation_folder(tmp_path / "first", ("mousepad_notes",))
    second = observation_folder(tmp_path / "second", ("xfce4_terminal_shell",))
    for task, reply in ((first, "WAIT"), (second, "FAIL")):
        model = _script(tmp_path / f"{task.name}.jsonl", reply)
        out = str(tmp_path / "o1" / task.name)
        assert _run(capsys, "run", str(task), "--model", model, "--out", out, *INSTRUCTION)[0] == 0
    tasks = [str(first), str(second), *INSTRUCTION]
    code, _, _ = _run(
        capsys, "run", *tasks, "--model", f"replay:{tmp_path / 'o1'}", "--out", str(tmp_path / "o2")
    )
    assert code == 0
    for name, expected in (("first", ["WAIT"]), ("second", ["FAIL"])):
        assert [e.actions for e in read_trajectory(tmp_path / "o2" / name)] == [tuple(expected)]

    third = observation_folder(tmp_path / "third", ("mousepad_notes",))
    code, _, err = _run(
        capsys,
        "run",
        *tasks[:2],
        str(third),
        *INSTRUCTION,
        "--model",
        f"replay:{tmp_path / 'o1'}",
        "--out",
        str(tmp_path / "o3"),
    )
    # A task the recordings hold nothing for is refused up front, by name.
    assert code == 2
    assert f"has no recording for the task {third} (no folder {tmp_path / 'o1' / 'third'})" in err
    assert not (tmp_path / "o3").exists()


def test_a_recording_turns_into_a_result_folder_as_the_readme_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`run REC --format osharm --model replay:REC` took its instruction only from task.json,
    which a recording does not have; it now comes from the recording's own lines."""
    rec, results = tmp_path / "rec", tmp_path / "results"
    bundled = read_trajectory(EXAMPLE)
    assert (
        _run(capsys, "run", str(EXAMPLE), "--model", f"replay:{EXAMPLE}", "--out", str(rec))[0] == 0
    )
    argv = [
        "run",
        str(rec),
        "--format",
        "osharm",
        "--model",
        f"replay:{rec}",
        "--out",
        str(results),
    ]
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, ""), out
    (folder,) = results.glob("pyautogui/a11y_tree/*/local/rec")
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert log["task"]["instruction"] == bundled[0].instruction
    assert [e.actions for e in read_trajectory(folder)] == [e.actions for e in bundled]
    # Lines that disagree cannot say which instruction the run had: refused, naming both.
    lines = (rec / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    other = json.loads(lines[1]) | {"instruction": "Close the window"}
    (rec / "trajectory.jsonl").write_text(
        lines[0] + "\n" + json.dumps(other) + "\n", encoding="utf-8"
    )
    code, out, err = _run(capsys, *argv[:-1], str(tmp_path / "again"))
    _fails_cleanly(code, out, err, 2, f"the steps of the recording {rec} hold different")
    assert "step 2: 'Close the window'" in err
    assert "pass --instruction" in err
    code, _, err = _run(capsys, *argv[:-1], str(tmp_path / "again"), *INSTRUCTION)
    assert (code, err) == (0, "")


def test_the_example_recording_renders_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    """`render --trajectory examples/task/trajectory.jsonl --step 2` failed on a screenshot the
    example does not keep (and on its tree): its lines now name the observations beside it,
    and its first step is the prompt `render examples/task` builds."""
    recording = str(EXAMPLE / "trajectory.jsonl")
    for step in ("1", "2"):
        code, out, err = _run(capsys, "render", "--trajectory", recording, "--step", step)
        assert (code, err) == (0, "")
    code, first, _ = _run(capsys, "render", "--trajectory", recording, "--step", "1")
    assert first == _run(capsys, "render", str(EXAMPLE))[1]
    assert "=== total: 1317 tokens in 4 messages" in out
