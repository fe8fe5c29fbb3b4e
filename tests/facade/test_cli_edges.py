"""The command line where users trip: keys set wrongly, options for another mode, a bad
observation in a task list, retries that used to print a bare event name."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import stamina

from adapters._wire import redact
from adapters.cli import _TermAsInterrupt, main
from adapters.errors import ConfigurationError
from adapters.registry import client_for
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.conftest import CLI_CHILD
from tests.facade.helpers import observation_folder, write_task_list

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task"


def _export(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """`value` in the environment as a UTF-8 shell exports it, as bytes: read back as this
    process's file-system encoding decodes them (under `LC_ALL=C PYTHONUTF8=0` an `É` becomes
    two surrogate escapes, and `setenv` cannot even hold it)."""
    monkeypatch.setitem(os.environb, name.encode(), value.encode("utf-8"))


@pytest.mark.parametrize("key", ["sk-proj-SECRET123\nsk-second-line", "sk-proj-SÉCRET", "sk x"])
def test_a_key_no_header_can_carry_is_refused_without_showing_it(
    key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _export(monkeypatch, "OPENAI_API_KEY", key)
    with pytest.raises(ConfigurationError, match="the API key in OPENAI_API_KEY holds") as e:
        client_for("gpt-4o")
    assert "CRET" not in str(e.value)
    with pytest.raises(ConfigurationError, match="the API key in api_key holds"):
        client_for("claude-sonnet-4-5", api_key=key)
    _export(monkeypatch, "MY_KEY", key)
    argv = ["predict", str(EXAMPLE), "--model", "compat/m", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--api-key-env", "MY_KEY"]) == 2
    err = capsys.readouterr().err
    assert "the API key in MY_KEY (--api-key-env) holds" in err
    assert "CRET" not in err


def test_a_key_quoted_escaped_by_a_library_is_still_redacted() -> None:
    key = "sk-proj-SECRET123\nsk-second-line"
    message = "Illegal header value b'Bearer sk-proj-SECRET123\\nsk-second-line'"
    assert redact(message, ["Bearer " + key, key]) == "Illegal header value b'[redacted]'"
    assert "SÉCRET" not in redact("value 'sk-SÉCRET\\n'", ["sk-SÉCRET\n"])


RESUME = "run the same command again to resume (finished tasks are skipped)"


def test_task_list_options_are_refused_for_task_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    argv += ["--out", str(tmp_path / "out")]
    for extra, flag in (
        (["--env-url", "http://127.0.0.1:9"], "--env-url"),
        (["--workers", "4"], "--workers"),
        (["--episode-timeout", "5"], "--episode-timeout"),
        (["--requests-per-minute", "10"], "--requests-per-minute"),
        (["--continue-unfinished"], "--continue-unfinished"),
        (["--examples", str(tmp_path)], "--examples"),
        (["--domain", "os"], "--domain"),
        (["--observations", str(tmp_path)], "--observations"),
        (["--progress"], "--progress"),
        (["--env-revert", "true"], "--env-revert"),
        (["--record"], "--record"),
        # These three had defaults, so a task directory run could not tell them given.
        (["--settle", "3"], "--settle"),
        (["--env-ready-timeout", "3"], "--env-ready-timeout"),
        (["--ray-cpus-per-worker", "0.5"], "--ray-cpus-per-worker"),
    ):
        assert main([*argv, *extra]) == 2
        assert f"{flag} belongs to run-tasks (OSWorld task lists)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_task_list_options_need_the_option_they_qualify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--settle, --env-ready-timeout and --ray-cpus-per-worker were silently unused (bad values
    too) in a run without --env-url / --env-revert / --ray; now each names what it needs, and a
    value Ray cannot take is refused before any cluster is looked for."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    observation_folder(tmp_path / "obs")
    argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples), "--model", "compat/m"]
    argv += ["--observations", str(tmp_path / "obs"), "--out", str(tmp_path / "out")]
    for extra, message in (
        (["--settle", "-1"], "--settle waits after a live VM's task setup: give --env-url URL"),
        (["--settle", "3"], "--settle waits after a live VM's task setup: give --env-url URL"),
        (["--env-ready-timeout", "0"], "--env-ready-timeout bounds the wait for a reverted VM"),
        (["--ray-cpus-per-worker", "-2"], "--ray-cpus-per-worker sizes Ray's worker actors"),
        (
            ["--ray", "auto", "--ray-cpus-per-worker", "-2"],
            "--ray-cpus-per-worker takes a fraction in (0, 1] or a whole number; got -2",
        ),
        (["--ray", "auto", "--ray-cpus-per-worker", "1.5"], "a whole number; got 1.5"),
        (["--ray", "auto", "--ray-cpus-per-worker", "nan"], "a whole number; got nan"),
    ):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err, (extra, err)
        assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    url = ["--env-url", "http://127.0.0.1:9"]
    vm = [a for a in argv if a not in ("--observations", str(tmp_path / "obs"))] + url
    assert main([*vm, "--env-ready-timeout", "30"]) == 2
    assert "give --env-revert COMMAND" in capsys.readouterr().err


def test_task_directory_options_are_refused_for_task_lists(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not silently ignored: a task list's instructions are its tasks', its folders OS-Harm's."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    observation_folder(tmp_path / "obs")
    argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples), "--model", "compat/m"]
    argv += ["--observations", str(tmp_path / "obs"), "--out", str(tmp_path / "out")]
    for extra, flag in (
        (["--instruction", "something else"], "--instruction"),
        (["--overwrite"], "--overwrite"),
        (["--format", "jsonl"], "--format"),
        (["--format", "osharm"], "--format"),
        (["--at", "2"], "--at"),
    ):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert f"{flag} belongs to run (task directories)" in err
    assert not (tmp_path / "out").exists()


def test_at_without_fork_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--at", "1"]) == 2
    assert "--at K says how many steps of --fork RECORDED to replay" in capsys.readouterr().err


def test_a_task_whose_observation_cannot_be_read_fails_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b", "_c"]})
    desktops = tmp_path / "desktops" / "os"
    for name in ("_a", "_b", "_c"):
        observation_folder(desktops / name)
    broken = sorted((desktops / "_b").glob("*.xml"))[0]
    # A tree cut short.
    broken.write_text(broken.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in ("WAIT", "DONE")), encoding="utf-8"
    )
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(tmp_path / "desktops"), "--model", f"replay:{script}",
        "--observation-type", "a11y_tree", "--out", str(tmp_path / "results"), "--workers", "3",
    ]  # fmt: skip
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert (
        "[os/_b] failed: observation unreadable: accessibility tree is not well-formed XML" in out
    )
    assert "summary: 3 task(s): 2 finished, 0 skipped (already finished), 1 failed" in out
    shutil.rmtree(desktops / "_b")
    observation_folder(desktops / "_b")
    assert main(argv) == 0  # the rerun redoes only the failed one
    assert "summary: 3 task(s): 1 finished, 2 skipped" in capsys.readouterr().out


def test_each_retry_is_one_line_saying_when_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPBACK_KEY", "k")
    with LoopbackServer() as server, stamina.set_testing(True, attempts=1000, cap=True):
        server.enqueue(
            Reply(500, {"error": {"message": "overloaded"}}), Reply(200, chat_completion("DONE"))
        )
        argv = [
            "predict", str(EXAMPLE), "--model", "compat/m",
            "--base-url", server.base_url + "/v1", "--api-key-env", "LOOPBACK_KEY",
        ]  # fmt: skip
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert "osharm-agent: trying again in " in err
    assert "(retry 1): " in err
    assert "overloaded" in err
    assert "stamina.retry_scheduled" not in err


def test_every_task_directory_is_checked_before_any_model_is_called(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = observation_folder(tmp_path / "a", ("mousepad_notes",))
    second = observation_folder(tmp_path / "b", ("mousepad_notes",))
    (first / "task.json").write_text(json.dumps({"instruction": "Do a"}), encoding="utf-8")
    (second / "task.json").write_text('{"instruction": ', encoding="utf-8")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = ["run", str(first), str(second), "--model", f"replay:{script}"]
    argv += ["--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert f"task {second}: {second / 'task.json'} is not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written
    (second / "task.json").write_text(json.dumps({"instruction": "Do b"}), encoding="utf-8")
    for name in ("a", "b"):
        (tmp_path / "out" / name).mkdir(parents=True)
    (tmp_path / "out" / "b" / "trajectory.jsonl").write_text("", encoding="utf-8")
    assert main(argv) == 0  # b's trajectory is unfinished: redone, as a rerun resumes
    assert (tmp_path / "out" / "a" / "finished.json").is_file()
    assert (tmp_path / "out" / "b" / "finished.json").is_file()


def test_render_shows_the_request_cut_down_to_the_server_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["render", str(EXAMPLE), "--observation-type", "screenshot"]
    assert main([*argv, "--server-profile", "max_bytes=40000"]) == 0
    out, err = capsys.readouterr()
    assert "672x378" in out  # what predict would send, not the 1920x1080 original
    assert "request cut down to fit --server-profile" in err
    assert main([*argv, "--server-profile", "max_bytes=2000"]) == 1
    assert "cannot be made to fit max_bytes=2000" in capsys.readouterr().err


def test_an_out_that_is_a_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "bad.png"
    taken.write_bytes(b"x")
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    assert main([*argv, "--out", str(taken)]) == 2
    assert f"--out {taken} is a file" in capsys.readouterr().err


@pytest.mark.parametrize("out", ["", "  "])
@pytest.mark.parametrize("format_", ["jsonl", "osharm"])
def test_an_empty_out_is_refused_not_taken_as_the_current_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: str,
    format_: str,
) -> None:
    """`run TASK --out ''` wrote into (and with --overwrite emptied) the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("precious\n", encoding="utf-8")
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    assert main([*argv, "--format", format_, "--overwrite", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "argument --out: needs a path; got the empty path" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["render", str(EXAMPLE), "--som-out", ""], "--som-out"),
        (["run-tasks", "--tasks", "m.json", "--examples", "", "--out", "o"], "--examples"),
        (["run-tasks", "--tasks", "m.json", "--observations", " ", "--out", "o"], "--observations"),
    ],
)
def test_other_empty_path_options_are_named(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    assert main(argv) == 2
    assert f"argument {option}: needs a path" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("base_url", "words"),
    [
        ("http://127.0.0.1:abc/v1", "is not a URL: Invalid port: 'abc'"),
        ("http://[::1", "is not a URL"),
        ("http://127.0.0.1:99999/v1", "has port 99999, outside 1-65535"),
        ("http://127.0.0.1:0/v1", "has port 0, outside 1-65535"),
    ],
)
def test_a_malformed_base_url_is_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], base_url: str, words: str
) -> None:
    """A bad port in --base-url printed a 66-line traceback; now the usage error of any bad
    flag: one line naming --base-url, exit status 2, before anything is read or sent."""
    argv = ["predict", str(EXAMPLE), "--model", "compat/x", "--base-url", base_url]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "argument --base-url: the base URL" in err
    assert words in err


def test_small_render_and_key_mistakes_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["render", str(EXAMPLE), "--som-out", str(tmp_path / "x.png")]) == 2
    assert "--som-out writes the set-of-marks screenshot" in capsys.readouterr().err
    assert main(["render", str(EXAMPLE), "--step", "2"]) == 2
    assert "--step K picks a step of a recording" in capsys.readouterr().err
    argv = ["predict", str(EXAMPLE), "--model", "compat/m", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--api-key-env", " "]) == 2
    assert "--api-key-env needs the name of a variable" in capsys.readouterr().err

    class GoneReader(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", GoneReader())
    assert main(["render", str(EXAMPLE), "--json"]) == 141  # `| head`: quiet, as shell tools
    assert capsys.readouterr().err == ""


def _three_tasks(tmp_path: Path) -> list[Path]:
    tasks = [observation_folder(tmp_path / name) for name in ("t1", "t2", "t3")]
    for task in tasks:
        (task / "task.json").write_text(
            json.dumps({"instruction": f"Do {task.name}"}), encoding="utf-8"
        )
    return tasks


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe<a/>")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("spoil", [_not_utf8, _fifo], ids=["not-utf8", "fifo"])
@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_a_jsonl_task_whose_observation_cannot_be_read_fails_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spoil: Any, which: int
) -> None:
    """As with --format osharm, the task fails and the run goes on to the next one, summary and
    all (the first observation used to be read outside the per-task error handling)."""
    tasks = _three_tasks(tmp_path)
    spoil(sorted(tasks[1].glob("*.xml"))[which])
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in ("WAIT", "DONE")), encoding="utf-8"
    )
    argv = ["run", *map(str, tasks), "--model", f"replay:{script}"]
    argv += ["--observation-type", "a11y_tree", "--out", str(tmp_path / "out")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"summary [t2]: {which} step(s), observation 0{which + 1}_" in out
    assert " unreadable: " in out
    for name in ("t1", "t3"):
        assert f"summary [{name}]: 2 step(s), ended with DONE" in out
    assert "summary (run): " in out


def _recording_dir(tmp_path: Path) -> Path:
    """A recorded run that is also a task directory (its step files are observations)."""
    recorded = tmp_path / "rec"
    shutil.copytree(EXAMPLE, recorded)
    return recorded


@pytest.mark.parametrize("out_format", ["jsonl", "osharm"])
@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("out-is-the-task", "is the task directory"),
        ("out-holds-the-tasks", "holds the task directory"),
        ("out-inside-the-task", "is inside the task directory"),
        ("out-links-to-the-task", "is the task directory"),
        ("out-is-the-replay", "is the replay source"),
        ("out-holds-the-replay-file", "holds the replay source"),
        ("out-is-the-fork", "is the --fork source"),
    ],
)
def test_an_out_that_overlaps_what_the_run_reads_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, said: str, out_format: str
) -> None:
    """--out is checked against the task directories and the replay and fork sources before
    anything is written: with --overwrite the recording being replayed used to be deleted."""
    task = _recording_dir(tmp_path)
    replay = tmp_path / "replay"
    shutil.copytree(EXAMPLE, replay)
    tasks, model, fork = [task], f"replay:{replay}", []
    out = {
        "out-is-the-task": task,
        "out-holds-the-tasks": tmp_path,
        "out-inside-the-task": task / "sub",
        "out-links-to-the-task": tmp_path / "link",
        "out-is-the-replay": replay,
        "out-holds-the-replay-file": replay,
        "out-is-the-fork": replay,
    }[case]
    if case == "out-links-to-the-task":
        out.symlink_to(task)
    if case == "out-holds-the-tasks":
        tasks.append(shutil.copytree(EXAMPLE, tmp_path / "other"))
    if case == "out-holds-the-replay-file":
        model = f"replay:{replay / 'trajectory.jsonl'}"
    if case == "out-is-the-fork":
        model, fork = f"replay:{EXAMPLE / 'trajectory.jsonl'}", ["--fork", str(replay)]
    before = {p.name: p.read_bytes() for p in (*task.iterdir(), *replay.iterdir())}
    argv = ["run", *map(str, tasks), "--model", model, *fork, "--out", str(out)]
    code = main([*argv, "--overwrite", "--format", out_format])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--out {out} {said}" in err
    assert err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (*task.iterdir(), *replay.iterdir())} == before
    assert not (task / "sub").exists()


@pytest.mark.parametrize("scheme", ["replay/", "REPLAY:", "replay|"])
def test_every_spelling_of_a_replay_model_is_checked_against_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scheme: str
) -> None:
    """The registry takes `replay/P`, `REPLAY:P` and `replay|P` for `replay:P`; the --out check
    only knew `replay:`, so `--overwrite` rewrote the recording being replayed."""
    task = _recording_dir(tmp_path)
    replay = tmp_path / "replay"
    shutil.copytree(EXAMPLE, replay)
    before = (replay / "trajectory.jsonl").read_bytes()
    argv = ["run", str(task), "--model", f"{scheme}{replay}", "--out", str(replay), "--overwrite"]
    assert main(argv) == 2
    assert f"--out {replay} is the replay source {replay}" in capsys.readouterr().err
    assert (replay / "trajectory.jsonl").read_bytes() == before


def test_an_out_beside_what_the_run_reads_is_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = _recording_dir(tmp_path)
    argv = ["run", str(task), "--model", f"replay:{task}", "--out", str(tmp_path / "recx")]
    assert main(argv) == 0, capsys.readouterr().err


def test_an_out_holding_step_files_is_refused_and_no_link_is_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step files in --out with no trajectory are not a recording of ours: refused without
    --overwrite (a symbolic link step_0001.xml used to be written through to its target);
    --overwrite removes the link."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "step_0001.xml").symlink_to(victim)
    (out / "step_0002.png").write_text("other", encoding="utf-8")
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    argv += ["--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out} holds step files (step_0001.xml, ...) and no trajectory.jsonl" in err
    assert "--overwrite" in err
    assert (out / "step_0002.png").read_text(encoding="utf-8") == "other"
    assert main([*argv, "--overwrite"]) == 0
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (out / "step_0001.xml").is_symlink()
    assert (out / "step_0002.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("spoil", [_not_utf8, _fifo], ids=["not-utf8", "fifo"])
@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
def test_an_osharm_task_whose_observation_cannot_be_read_fails_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spoil: Any, which: int
) -> None:
    """The same in result folders: a FIFO where a tree should be is an unreadable observation
    (it used to be a TrajectoryError, which stopped the whole run)."""
    tasks = _three_tasks(tmp_path)
    spoil(sorted(tasks[1].glob("*.xml"))[which])
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in ("WAIT", "DONE") * 3), encoding="utf-8"
    )
    argv = ["run", *map(str, tasks), "--model", f"replay:{script}", "--format", "osharm"]
    argv += ["--observation-type", "a11y_tree", "--out", str(tmp_path / "out")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"[t2] observation 0{which + 1}_" in out
    assert "is not a regular file" in out or "is not UTF-8 text" in out
    assert out.split("[t3] ")[1].startswith("2 step(s), 2 action(s); folder ")


def test_a_number_too_large_for_a_float_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cap or price of hundreds of digits (argparse and JSON take them) is refused in one line."""
    argv = ["run", str(EXAMPLE), "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]
    argv += ["--out", str(tmp_path / "out")]
    huge = "9" * 400
    assert main([*argv, "--max-run-tokens", huge]) == 2
    err = capsys.readouterr().err
    assert "--max-run-tokens must be an integer > 0 that a float can hold" in err
    assert "Traceback" not in err
    prices = tmp_path / "prices.json"
    entry = {"model": "m", "input": 1, "output": int(huge), "read": "2026-11-01"}
    entry["source"] = "https://example.org/prices"
    prices.write_text(json.dumps({"models": [entry]}), encoding="utf-8")
    assert main([*argv, "--prices", str(prices)]) == 2
    err = capsys.readouterr().err
    assert "must be a finite number of USD per million tokens" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"id": 5}, "'id'"),
        ({"domain": ["os"]}, "'domain'"),
        ({"id": ""}, "'id'"),
        ({"id": None, "domain": "os"}, "'id'"),
    ],
)
def test_a_task_json_id_or_domain_that_is_no_string_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], named: str
) -> None:
    """They name the result folder; one that was not a non-empty string was silently replaced
    by the default (local, the directory's name), so the folder landed elsewhere."""
    task = observation_folder(tmp_path / "task", ("mousepad_notes",))
    (task / "task.json").write_text(
        json.dumps({"instruction": "Open the File menu", **fields}), encoding="utf-8"
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = ["run", str(task), "--model", f"replay:{script}", "--format", "osharm"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{task / 'task.json'}: {named} names the result folder" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_task_json_that_is_no_object_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = observation_folder(tmp_path / "task", ("mousepad_notes",))
    (task / "task.json").write_text('["os", "_a"]', encoding="utf-8")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = ["run", str(task), "--model", f"replay:{script}", "--format", "osharm"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--instruction", "x"]) == 2
    assert f"{task / 'task.json'} is not a JSON object" in capsys.readouterr().err


def test_a_failed_model_call_is_one_line_on_stderr_and_other_warnings_still_show(
    tmp_path: Path,
) -> None:
    """The agent's own "Model call failed ..." log line reached stderr (through logging's
    last-resort handler) beside the CLI's error line; now only the error line does, while the
    agent's other warnings (here a request cut down to fit) still show. A real process, so
    logging is as a user's shell sees it."""
    root = EXAMPLE.parents[1]
    with LoopbackServer() as server:
        server.enqueue(
            Reply(401, {"error": {"message": "bad key"}}), Reply(200, chat_completion("DONE"))
        )
        argv = [*CLI_CHILD, "predict", str(EXAMPLE), "--model", "compat/m"]
        argv += ["--base-url", server.base_url + "/v1"]
        failed = subprocess.run(argv, capture_output=True, text=True, cwd=root, check=False)
        cut = subprocess.run(
            [*argv, "--server-profile", "max_input_tokens=700"],
            capture_output=True,
            text=True,
            cwd=root,
            check=False,
        )
    assert failed.returncode == 1
    assert failed.stderr == "osharm-agent: error: model call failed: compat HTTP 401: bad key\n"
    assert cut.returncode == 0
    assert cut.stderr.startswith("Step 1: request cut down to fit server_profile")


def test_ray_auto_without_a_cluster_is_named_as_a_named_address_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--ray auto` with no cluster showed Ray's own message, which points at an `--address`
    flag the CLI does not have. (Ray itself is stood in for: a real `auto` would join any
    cluster another test started on this machine.)"""

    def init(**_: object) -> None:
        raise ConnectionError(
            "Could not find any running Ray instance. Please specify the one to connect to by "
            "setting `--address` flag or `RAY_ADDRESS` environment variable."
        )

    monkeypatch.setitem(
        sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, init=init)
    )
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    observation_folder(tmp_path / "obs")
    argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples), "--model", "compat/m"]
    argv += ["--base-url", "http://127.0.0.1:9/v1", "--observations", str(tmp_path / "obs")]
    assert main([*argv, "--out", str(tmp_path / "out"), "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "osharm-agent: error: no Ray cluster answers at auto: Ray found none to join "
        "(start it, or check --ray)\n"
    )


def test_a_vm_that_does_not_answer_is_named_by_its_env_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With several VMs the error that stops the run ('GET /screenshot: ConnectError ...') did
    not say which one went away; it now starts with that VM's --env-url."""
    from tests.facade.test_environments import serve_vm

    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    with (
        LoopbackServer() as good,
        socket.socket() as held,  # bound, never listening: refused, and no one else gets it
        stamina.set_testing(True, attempts=1),
    ):
        held.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{held.getsockname()[1]}"
        serve_vm(good)
        argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples)]
        argv += ["--model", f"replay:{script}", "--out", str(tmp_path / "out"), "--settle", "0"]
        argv += ["--env-url", good.base_url, "--env-url", dead]
        assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"osharm-agent: error: --env-url {dead}: GET /screenshot: ConnectError")


@pytest.mark.parametrize(
    ("sent", "status", "said"), [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")]
)
def test_sigterm_stops_a_run_as_ctrl_c_does(
    tmp_path: Path, sent: str, status: int, said: str
) -> None:
    """Schedulers stop jobs with SIGTERM; without a handler the run died at once (environments
    not closed, VMs left recording). It now stops as on Ctrl-C: one line, its own status,
    and the unfinished tasks are run by the next run."""
    root = EXAMPLE.parents[1]
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    desktop = observation_folder(tmp_path / "obs")
    with LoopbackServer(default_delay=30.0) as server:
        argv = [
            *CLI_CHILD, "run-tasks", "--tasks", str(meta), "--examples",
            str(examples), "--observations", str(desktop), "--model", "compat/m",
            "--base-url", server.base_url + "/v1", "--workers", "2", "--out", str(tmp_path / "out"),
        ]  # fmt: skip
        run = subprocess.Popen(
            argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while len(server.requests) < 2 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        run.send_signal(getattr(signal, sent))
        out, err = run.communicate(timeout=60)
    assert run.returncode == status, err
    assert err.endswith(f"osharm-agent: {said}; {RESUME}\n")
    assert "Traceback" not in err
    assert "finished" not in out


def test_sigterm_stops_the_command_even_when_the_caller_has_its_own_sigint_handler() -> None:
    """SIGTERM was handed to whatever SIGINT handler was installed: a wrapper program's own
    (one that only sets a flag) kept the run going until the scheduler's SIGKILL. Only
    Python's and asyncio's are asked now; otherwise the command stops at once."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    called: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: called.append(signum))
    try:
        terminate = _TermAsInterrupt()

        def term_then_wait() -> None:
            with terminate:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)

        with pytest.raises(KeyboardInterrupt):
            term_then_wait()
        assert terminate.received
        assert called == []
    finally:
        signal.signal(signal.SIGINT, previous)
