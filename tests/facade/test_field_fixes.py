"""What users hit in the field: names that are not names, an empty task folder, resuming."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from adapters.cli import main
from tests.facade.helpers import observation_folder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"


def _script(path: Path, *replies: str) -> str:
    path.write_text("".join(json.dumps({"response": r}) + "\n" for r in replies), encoding="utf-8")
    return f"replay:{path}"


def test_a_task_directory_named_through_dot_dot_is_recorded_under_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run a/sub/.. b --out OUT --overwrite` recorded the first task under OUT/.. (outside
    --out, removing the files there); it is now recorded under OUT/a, its real name."""
    first = observation_folder(tmp_path / "a", ("mousepad_notes",))
    (first / "sub").mkdir()
    second = observation_folder(tmp_path / "b", ("mousepad_notes",))
    out = tmp_path / "work" / "out"
    out.mkdir(parents=True)
    precious = tmp_path / "work" / "step_0001.png"
    precious.write_bytes(b"the user's own file")
    model = _script(tmp_path / "r.jsonl", "DONE")
    argv = ["run", str(first / "sub" / ".."), str(second), "--model", model, "--out", str(out)]
    for _ in range(2):  # the second time with --overwrite, which empties what it writes over
        assert main([*argv, "--overwrite", "--instruction", "x"]) == 0
    assert precious.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in out.iterdir()) == ["a", "b", "manifest.json"]
    assert (out / "a" / "trajectory.jsonl").is_file()
    assert "summary [a]: 1 step(s), ended with DONE" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["jsonl", "osharm"])
def test_a_task_directory_given_as_dot_takes_its_real_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run . other` from inside a task directory: `.` is recorded under its real name."""
    task = observation_folder(tmp_path / "mine", ("mousepad_notes",))
    other = observation_folder(tmp_path / "other", ("mousepad_notes",))
    monkeypatch.chdir(task)
    argv = ["run", ".", str(other), "--model", _script(tmp_path / "r.jsonl", "DONE")]
    code = main([*argv, "--out", str(tmp_path / "out"), "--format", fmt, "--instruction", "x"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "[mine]" in printed
    assert list((tmp_path / "out").rglob("mine"))


def test_an_empty_task_folder_says_first_that_it_holds_no_observations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty task folder complained about a missing instruction; it now says it holds no
    observations, which is what is wrong with it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["run", str(empty), "--model", _script(tmp_path / "r.jsonl", "DONE")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "holds no observations" in err
    assert "instruction" not in err
    assert err.count("\n") == 1


def test_a_misspelt_model_is_one_short_line_with_the_closest_names(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--model gpt4o` printed a 1,447-character line listing every form; now one short line
    names the closest names and the command that lists them all."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["predict", str(EXAMPLE), "--model", "gpt4o"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert len(err) < 300
    assert "did you mean gpt-4o?" in err
    assert "osharm-agent models" in err


def test_models_lists_the_supported_forms_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`osharm-agent models`: one row per name form, with its provider and what it needs."""
    assert main(["models"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["name", "form", "provider"]
    compat = next(row for row in rows if row.startswith("compat/<model>"))
    assert "--base-url URL" in compat
    assert len({len(row.rstrip()) - len(row.split()[-1]) for row in rows[1:-1]}) <= 2


def test_version_says_which_release_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`osharm-agent --version` prints the installed version."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("osharm-agent ")


@pytest.mark.parametrize("fmt", ["jsonl", "osharm"])
def test_nothing_listening_at_the_model_url_fails_fast_and_leaves_no_empty_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """A wrong port in --base-url cost minutes of 30 s retries and left an empty --out behind,
    named as a trajectory in the summary; now two quick retries, one line naming the URL,
    a summary naming no file that does not exist, and no --out left empty."""
    with socket.socket() as held:  # bound, so no one else takes the port, and never listening
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}/v1"
        argv = ["run", str(EXAMPLE), "--model", "compat/m", "--base-url", url]
        code = main([*argv, "--format", fmt, "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.count("trying again in 0.5 s") == 2
    assert "nothing is listening at http://127.0.0.1:" in captured.out
    if fmt == "jsonl":
        assert not (tmp_path / "out").exists()
        assert "trajectory none" in captured.out
    else:  # OSWorld's error line marks the failed task's folder, which is kept
        assert list((tmp_path / "out").rglob("traj.jsonl"))


def test_more_workers_than_one_process_keeps_busy_are_told_about_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past what one process's CPU keeps busy (about 400 episodes at a 5 s model), run-tasks
    says so and points to --ray, and the model client's pool holds a connection per worker."""
    from adapters.cli import _task_list
    from tests.facade.helpers import write_task_list

    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    desktop = observation_folder(tmp_path / "obs")
    argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples)]
    argv += ["--observations", str(desktop), "--model", _script(tmp_path / "r.jsonl", "DONE")]
    assert main([*argv, "--out", str(tmp_path / "out"), "--workers", "600"]) == 0
    err = capsys.readouterr().err
    assert "one process keeps about 416 episodes busy" in err
    assert "--ray spreads episodes over processes" in err
    assert _task_list.connections_for(600) == 600


def test_run_tasks_sizes_the_model_clients_pool_to_its_workers() -> None:
    """`--workers 200` kept at most 128 model calls in flight (httpx's default pool): the run's
    clients now hold a connection per worker."""
    from adapters.cli import build_parser
    from adapters.cli._inputs import ModelClients
    from adapters.engine import HttpModelClient, connections_for

    args = build_parser().parse_args(
        ["run-tasks", "--tasks", "m.json", "--examples", "e", "--out", "o", "--model", "compat/m",
         "--base-url", "http://127.0.0.1:9/v1", "--workers", "200"]
    )  # fmt: skip
    client = ModelClients(args, max_connections=connections_for(args.workers)).get()
    assert isinstance(client, HttpModelClient)
    assert client.max_connections == 200
    client.close()
