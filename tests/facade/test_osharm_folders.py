"""OS-Harm / OSWorld result folders: written in the documented layout, read back, replayed.

Field names and shapes follow the OS-Harm documentation's trajectory-format page
(https://tml-epfl-os-harm.mintlify.app/reference/trajectory-format) and the
`better_log` construction of OS-Harm's `lib_run_single.py` as the forks share it
(summarised in the project's OSHARM_FORMATS notes, sections 1-3).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import RetryableError, TrajectoryError, TrajectoryExistsError
from adapters.record import ActionRecord, EpisodeEnd
from adapters.runs.episode import run_episode
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import open_trajectory
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.rebuild import rebuild_step
from adapters.trajectories.replay import ReplayClient, ReplayEnv
from osharm_core import (
    AgentConfig,
    ConfigError,
    linearize_accessibility_tree,
    parse_code_from_string,
)
from tests.facade.helpers import load, observation_folder

CONFIG = AgentConfig(
    model="gpt-4o", observation_type="screenshot_a11y_tree", action_space="pyautogui"
)
TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_save_notes")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
FIVE = ("mousepad_notes", "mousepad_file_menu", "xfce4_terminal_shell") * 2
TWO = (
    "Two actions.\n```python\npyautogui.click(1, 2)\n```\n```python\npyautogui.press('enter')\n```"
)


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 23, 12, 0, 0).replace(second=next(ticks) % 60)


@pytest.fixture
def folder_and_replies(tmp_path: Path) -> tuple[Path, list[str]]:
    """A three-step episode on real observations written through ResultWriter."""
    replies = [CLICK, TWO, "DONE"]
    env = ReplayEnv(
        observation_folder(tmp_path / "obs", FIVE),
        instruction=TASK.instruction,
        evaluator=lambda _: 0.0,
    )
    agent = PromptAgent.from_config(CONFIG, client=FakeClient(replies))
    folder = result_folder(tmp_path / "results", CONFIG, TASK.domain, TASK.example_id)
    writer = ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15, clock=_clock())
    assert run_episode(agent, env, env.reset(), writer, max_steps=15) == 0.0
    return folder, replies


def test_the_folder_layout_is_the_documented_one(
    folder_and_replies: tuple[Path, list[str]], tmp_path: Path
) -> None:
    folder, _ = folder_and_replies
    assert folder == tmp_path / "results/pyautogui/screenshot_a11y_tree/gpt-4o/os/_save_notes"
    stems = [
        "step_0",
        *(f"step_{n}_20261123@12000{t}" for n, t in ((1, 0), (2, 1), (2, 2), (3, 3))),
    ]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["better_log.json", "result.txt", "traj.jsonl"]
        + [stem + ext for stem in stems for ext in (".png", ".xml")]
    )
    assert (folder / "result.txt").read_text(encoding="utf-8") == "0.0\n"


def test_traj_jsonl_has_one_line_per_action_with_the_documented_keys(
    folder_and_replies: tuple[Path, list[str]],
) -> None:
    folder, _ = folder_and_replies
    lines = [
        json.loads(line)
        for line in (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [list(line) for line in lines] == [
        ["step_num", "action_timestamp", "action", "reward", "done", "info", "screenshot_file"]
    ] * 4
    assert [line["step_num"] for line in lines] == [1, 2, 2, 3]
    assert [line["action"] for line in lines] == [
        "pyautogui.click(19, 31)",
        "pyautogui.click(1, 2)",
        "pyautogui.press('enter')",
        "DONE",
    ]
    assert lines[0]["screenshot_file"] == f"step_1_{lines[0]['action_timestamp']}.png"
    assert lines[-1]["done"] is True
    for line in lines:
        assert (folder / line["screenshot_file"]).is_file()


def test_better_log_is_what_the_judge_reads(folder_and_replies: tuple[Path, list[str]]) -> None:
    folder, replies = folder_and_replies
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    assert list(log) == ["params", "task", "steps"]
    assert log["params"] == {
        "platform": "ubuntu",
        "model": "gpt-4o",
        "max_tokens": 1500,
        "top_p": 0.9,
        "temperature": 0.5,
        "action_space": "pyautogui",
        "observation_type": "screenshot_a11y_tree",
        "max_trajectory_length": 3,
        "a11y_tree_max_tokens": 10000,
        "max_steps": 15,
    }
    assert log["task"] == {"jailbreak": False, "injection": None, "instruction": "Save the notes"}
    steps = log["steps"]
    assert [list(s) for s in steps] == [["a11y_tree", "screenshot_file", "response", "actions"]] * 3
    assert [s["response"] for s in steps] == replies
    assert [s["screenshot_file"] for s in steps] == [
        "step_0.png",
        "step_1_20261123@120000.png",
        "step_2_20261123@120002.png",
    ]
    obs = ReplayEnv(folder.parents[5] / "obs").reset()
    assert steps[0]["a11y_tree"] == linearize_accessibility_tree(obs["accessibility_tree"])
    assert steps[0]["a11y_tree"].startswith(
        "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)\n"
    )


def test_a_written_folder_reads_back_and_replays_to_the_same_actions(
    folder_and_replies: tuple[Path, list[str]],
) -> None:
    folder, replies = folder_and_replies
    entries = load_result_folder(folder)
    assert [e.response for e in entries] == replies
    assert [list(e.actions or ()) for e in entries] == [parse_code_from_string(r) for r in replies]
    assert open_trajectory(folder).entries == entries
    client = ReplayClient(folder)
    assert client.remaining == 3
    rerun = PromptAgent.from_config(CONFIG, client=FakeClient())
    assert rerun.config == CONFIG
    assert main(["replay", str(folder)]) == 0


def test_any_step_of_a_written_folder_renders(
    folder_and_replies: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = folder_and_replies
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    for step in log["steps"]:
        assert main(["render", str(folder / step["screenshot_file"]), "--instruction", "x"]) == 0
        assert "tag\tname\ttext" in capsys.readouterr().out


def test_the_cli_writes_osharm_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = observation_folder(tmp_path / "task")
    (task / "task.json").write_text(
        json.dumps({"id": "_notes", "domain": "os", "instruction": "Open the File menu"}),
        encoding="utf-8",
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    out = tmp_path / "results"
    code = main(
        ["run", str(task), "--model", f"replay:{script}", "--out", str(out), "--format", "osharm"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    folder = (
        out
        / "pyautogui"
        / "a11y_tree"
        / f"replay_{str(script).replace('/', '_')}"
        / "os"
        / "_notes"
    )
    assert (folder / "better_log.json").is_file()
    # Nothing judged a replayed desktop: the folder is ended but unscored, with no made-up 0.0.
    assert not (folder / "result.txt").exists()
    assert (folder / "unscored.txt").read_text(encoding="utf-8").startswith("the episode ended")
    assert printed.startswith("[task] 2 step(s), 2 action(s); folder ")
    assert "score" not in printed
    assert main(["replay", str(folder)]) == 0
    capsys.readouterr()
    again = main(
        ["run", str(task), "--model", f"replay:{script}", "--out", str(out), "--format", "osharm"]
    )
    assert again == 0  # finished: the same command skips it, and --overwrite runs it again
    assert capsys.readouterr().out.startswith("[task] skipped: already finished; folder ")


def test_the_cli_counts_a_link_left_in_a_result_folder_as_its_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder holding only a (dangling) link is an unfinished folder: redone, as a task
    list redoes one, its writer removing the link and never making its target."""
    task = observation_folder(tmp_path / "task")
    (task / "task.json").write_text(
        json.dumps({"id": "_notes", "domain": "os", "instruction": "Open the File menu"}),
        encoding="utf-8",
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    folder = out / "pyautogui" / "a11y_tree" / f"replay_{str(script).replace('/', '_')}"
    folder = folder / "os" / "_notes"
    folder.mkdir(parents=True)
    (folder / "recording.mp4.part").symlink_to(tmp_path / "made")
    argv = ["run", str(task), "--model", f"replay:{script}", "--out", str(out)]
    assert main([*argv, "--format", "osharm"]) == 0
    assert not (folder / "recording.mp4.part").is_symlink()
    assert not (tmp_path / "made").exists()
    assert (folder / "unscored.txt").is_file()


@pytest.mark.parametrize(
    "ids", [("same", "same"), ("x:1", "x_1"), ("x", " x ")], ids=["same", "x:1,x_1", "spaces"]
)
def test_the_cli_refuses_two_tasks_sharing_a_result_folder_before_running_any(
    tmp_path: Path, ids: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two task directories whose task.json domain/id name one result folder would overwrite
    each other's results (silently, with --overwrite): refused before any model call."""
    tasks = []
    for name, example_id in zip(("a", "b"), ids, strict=True):
        task = observation_folder(tmp_path / name)
        (task / "task.json").write_text(
            json.dumps({"id": example_id, "domain": "os", "instruction": f"task {name}"}),
            encoding="utf-8",
        )
        tasks.append(str(task))
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE") * 2), encoding="utf-8"
    )
    out = tmp_path / "results"
    argv = ["run", *tasks, "--model", f"replay:{script}", "--out", str(out), "--format", "osharm"]
    assert main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert f"tasks {tasks[0]} and {tasks[1]} would share the result folder" in err
    assert not out.exists()


def test_the_cli_refuses_a_task_id_that_cannot_name_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = observation_folder(tmp_path / "task")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    argv = [
        "run",
        str(task),
        "--model",
        f"replay:{script}",
        "--out",
        str(out),
        "--format",
        "osharm",
    ]
    for bad in ("a\0b", "a\ud800b", "x" * 256):
        (task / "task.json").write_text(
            json.dumps({"id": bad, "instruction": "do"}), encoding="utf-8"
        )
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"task {task}: " in err
        assert "cannot name a result folder" in err
    assert not out.exists()


def test_a_failing_episode_ends_with_the_error_line_and_no_result(tmp_path: Path) -> None:
    env = ReplayEnv(observation_folder(tmp_path / "obs"))
    broken = FakeClient([CLICK], errors={1: RetryableError("overloaded", provider="fake")})
    agent = PromptAgent.from_config(CONFIG, client=broken)
    folder = tmp_path / "task"
    writer = ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15)
    with pytest.raises(RetryableError):
        run_episode(agent, env, env.reset(), writer, max_steps=15)
    last = json.loads((folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert last == {"Error": "Time limit exceeded in os/_save_notes"}
    assert not (folder / "result.txt").exists()
    with pytest.raises(TrajectoryExistsError):
        ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15)
    verdict = folder / "judgment" / "gpt-4.1" / "aer" / "v3" / "judgment.json"
    verdict.parent.mkdir(parents=True)
    # The judge's verdict on the run being redone.
    verdict.write_text('{"safety": false}', encoding="utf-8")
    caption = folder / "captions" / "gpt-4o" / "step_0.last_screenshot_caption.json"
    caption.parent.mkdir(parents=True)
    # The judge reuses any it finds.
    caption.write_text('"the old run\'s first screen"', encoding="utf-8")
    keep = tmp_path / "elsewhere"
    keep.mkdir()
    ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15, overwrite=True)
    assert list(folder.iterdir()) == []
    assert keep.is_dir()


#: "é" on a UTF-8 file system; elsewhere what its two bytes decode to (two characters), so
#: 128 of them are 256 bytes under any file-system encoding.
TWO_BYTES = os.fsdecode("é".encode())


@pytest.mark.parametrize(
    ("example_id", "message"),
    [
        ("a\0b", "cannot name a result folder"),
        ("a\ud800b", "the file system cannot encode it"),
        (TWO_BYTES * 128, "256 (bytes|characters), over 255"),
        ("\x01" * 300, "300 characters, over 255 bytes"),  # each \x01 is 4 characters quoted
    ],
)
def test_a_name_no_folder_can_have_is_a_trajectory_error(example_id: str, message: str) -> None:
    with pytest.raises(TrajectoryError, match=message):
        result_folder("results", CONFIG, "os", example_id)
    with pytest.raises(TrajectoryError) as huge:  # quoted by an excerpt, however long
        result_folder("results", CONFIG, "os", example_id * 1_000_000)
    assert len(str(huge.value)) < 200
    assert result_folder("results", CONFIG, "os", TWO_BYTES * 127).name == TWO_BYTES * 127


def test_a_result_folder_that_cannot_be_made_is_a_trajectory_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    for folder in (tmp_path / "file" / "task", tmp_path / "a\0b", tmp_path / ("x" * 300)):
        with pytest.raises(TrajectoryError, match="cannot make the result folder"):
            ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15)


def test_the_cli_refuses_a_directory_where_a_result_folder_keeps_a_file_before_any_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even with --overwrite (which removes files only): named, before any task runs (the
    second task's writer used to raise IsADirectoryError after the first task ran)."""
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    out = tmp_path / "results"
    tasks = []
    for name in ("_one", "_two"):
        task = observation_folder(tmp_path / name)
        (task / "task.json").write_text(
            json.dumps({"id": name, "domain": "os", "instruction": "Open the File menu"}),
            encoding="utf-8",
        )
        tasks.append(str(task))
    model = f"replay_{str(script).replace('/', '_')}"
    (out / "pyautogui" / "a11y_tree" / model / "os" / "_two" / "result.txt").mkdir(parents=True)
    argv = ["run", *tasks, "--model", f"replay:{script}", "--out", str(out), "--format", "osharm"]
    assert main([*argv, "--overwrite"]) == 2
    assert "holds result.txt, a directory, where its writer keeps a file" in capsys.readouterr().err
    assert not (out / "pyautogui" / "a11y_tree" / model / "os" / "_one").exists()


@pytest.mark.parametrize(
    "name",
    [
        "result.txt",
        "unscored.txt",
        "better_log.json",
        "traj.jsonl",
        "step_0.png",
        "step_0.xml",
        "better_log.json.tmp",
    ],
)
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_where_the_writer_keeps_a_file_is_refused_when_it_opens(
    tmp_path: Path, name: str, overwrite: bool
) -> None:
    """Named with its folder, before anything is removed (it used to be a raw
    IsADirectoryError once the episode had made its model calls)."""
    folder = tmp_path / "task"
    (folder / name).mkdir(parents=True)
    (folder / name / "inside").write_text("kept", encoding="utf-8")
    if overwrite:  # a file it would remove: still there
        (folder / "step_1_20260101@000000.png").write_bytes(b"kept")
    message = f"the result folder {folder} holds {name}, a directory, where its writer keeps a file"
    with pytest.raises(TrajectoryError, match=re.escape(message)) as caught:
        ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15, overwrite=overwrite)
    assert not isinstance(caught.value, OSError)
    assert (folder / name / "inside").read_text(encoding="utf-8") == "kept"
    if overwrite:
        assert (folder / "step_1_20260101@000000.png").read_bytes() == b"kept"


def test_a_file_the_writer_cannot_write_mid_episode_is_a_trajectory_error(tmp_path: Path) -> None:
    """A directory that appears at a step's name (its file is renamed over it) or at traj.jsonl
    (appended to) after the writer opened: typed and named, no leftover `.tmp`."""
    observation = ReplayEnv(observation_folder(tmp_path / "obs")).reset()
    folder = tmp_path / "task"
    writer = ResultWriter(
        folder, config=CONFIG, task=TASK, max_steps=15, clock=lambda: datetime(2026, 1, 1)
    )
    writer.begin(observation)
    (folder / "step_1_20260101@000000.png").mkdir()
    with pytest.raises(TrajectoryError, match=r"cannot write .*step_1_20260101@000000\.png: "):
        writer.action(
            ActionRecord(
                step=1,
                action="pyautogui.click(1, 2)",
                observation=observation,
                started=datetime(2026, 1, 1),
            )
        )
    assert not list(folder.glob("*.tmp"))
    (folder / "step_1_20260101@000000.png").rmdir()
    (folder / "traj.jsonl").mkdir()
    with pytest.raises(TrajectoryError, match=r"cannot append to .*traj\.jsonl: "):
        writer.finish(EpisodeEnd(failed="x"))


def _reference_shaped_folder(directory: Path) -> Path:
    """A folder as the reference's loop leaves it: a step with no action names a missing file."""
    directory.mkdir(parents=True)
    png = (
        Path(__file__).parents[1] / "fixtures" / "observations" / "mousepad_notes.png"
    ).read_bytes()
    for name in ("step_0.png", "step_1_20250101@100000.png", "step_3_20250101@100500.png"):
        (directory / name).write_bytes(png)
    steps = [
        {
            "a11y_tree": "tag\tname",
            "screenshot_file": "step_0.png",
            "response": CLICK,
            "actions": ["pyautogui.click(19, 31)"],
        },
        {
            "a11y_tree": "tag\tname",
            "screenshot_file": "step_1_20250101@100000.png",
            "response": "thinking only",
            "actions": [],
        },
        # The reference names this from the previous step number: the file does not exist.
        {
            "a11y_tree": "tag\tname",
            "screenshot_file": "step_2_20250101@100000.png",
            "response": TWO,
            "actions": ["pyautogui.click(1, 2)", "pyautogui.press('enter')"],
        },
        {
            "a11y_tree": "tag\tname",
            "screenshot_file": "step_3_20250101@100500.png",
            "response": [{"type": "computer_call", "action": {"type": "click"}}],
            "actions": ["DONE"],
        },
    ]
    log = {
        "params": {
            "platform": "ubuntu",
            "model": "o4-mini",
            "action_space": "pyautogui",
            "observation_type": "screenshot",
            "max_steps": 15,
        },
        "task": {"jailbreak": True, "injection": None, "instruction": "Do the thing"},
        "steps": steps,
    }
    (directory / "better_log.json").write_text(json.dumps(log), encoding="utf-8")
    (directory / "traj.jsonl").write_text(
        json.dumps({"Error": "Time limit exceeded in os/x"}) + "\n", encoding="utf-8"
    )
    return directory


def test_a_folder_the_reference_wrote_loads_and_replays(tmp_path: Path) -> None:
    folder = _reference_shaped_folder(tmp_path / "ref")
    entries = load_result_folder(folder)
    assert [e.step for e in entries] == [1, 2, 3, 4]
    assert entries[2].screenshot == "step_1_20250101@100000.png"
    assert entries[3].response.startswith('[{"type": "computer_call"')
    assert (entries[0].model, entries[0].observation_type) == ("o4-mini", "screenshot")
    assert entries[1].actions == ()
    client = ReplayClient(folder)
    assert [client.complete(_request()).text for _ in range(2)] == [CLICK, "thinking only"]


def test_replay_reports_differences_in_a_reference_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    folder = _reference_shaped_folder(tmp_path / "ref")
    caplog.set_level(logging.WARNING)
    code = main(["replay", str(folder)])
    out = capsys.readouterr().out
    assert "step 4: DIFFERS" in out  # the recorded DONE came from a computer-use reply
    assert code == 1


def _request() -> Any:
    from adapters.contract import ModelRequest
    from osharm_core import Message, TextPart

    return ModelRequest(model="x", messages=(Message("user", (TextPart("hi"),)),))


def test_an_action_is_stamped_when_it_begins(tmp_path: Path) -> None:
    """The reference takes `action_timestamp` before `env.step` (which, on a VM, runs the
    command, pauses and fetches the observation: seconds); it was taken after."""
    events: list[str] = []
    ticks = itertools.count()

    def clock() -> datetime:
        events.append("clock")
        return datetime(2026, 11, 23, 12, 0, next(ticks) % 60)

    class Recorded(ReplayEnv):
        def step(self, action: Any, pause: float = 0) -> Any:
            events.append("step")
            return super().step(action, pause)

    env = Recorded(observation_folder(tmp_path / "obs", FIVE), instruction=TASK.instruction)
    agent = PromptAgent.from_config(CONFIG, client=FakeClient([TWO, "DONE"]))
    writer = ResultWriter(tmp_path / "out", config=CONFIG, task=TASK, max_steps=15, clock=clock)
    run_episode(agent, env, env.reset(), writer, max_steps=15)
    assert events == ["clock", "step"] * 3
    lines = [
        json.loads(line)
        for line in (tmp_path / "out/traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [line["action_timestamp"] for line in lines] == [
        "20261123@120000",
        "20261123@120001",
        "20261123@120002",
    ]


# --- observations in every form `Observation.from_dict` takes -----------------------------


def _as_given(observation: dict[str, Any]) -> dict[str, Any]:
    return observation


def _memoryviews(observation: dict[str, Any]) -> dict[str, Any]:
    tree = observation["accessibility_tree"].encode("utf-8")
    return {
        "screenshot": memoryview(observation["screenshot"]),
        "accessibility_tree": memoryview(tree),
    }


def _bytearrays(observation: dict[str, Any]) -> dict[str, Any]:
    tree = observation["accessibility_tree"].encode("utf-8")
    return {
        "screenshot": bytearray(observation["screenshot"]),
        "accessibility_tree": bytearray(tree),
    }


def _utf16_tree(observation: dict[str, Any]) -> dict[str, Any]:
    return {**observation, "accessibility_tree": observation["accessibility_tree"].encode("utf-16")}


class _FormEnv:
    """Serves the fixtures `names` in turn (the first from `first()`), each through `form`."""

    def __init__(self, names: tuple[str, ...], form: Any) -> None:
        self.observations = [form(load(name)) for name in names]
        self.served = 0

    def first(self) -> dict[str, Any]:
        return self.observations[0]

    def step(
        self, action: Any, pause: float = 0
    ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        self.served = min(self.served + 1, len(self.observations) - 1)
        return self.observations[self.served], 0.0, action == "DONE", {}

    def evaluate(self) -> float:
        return 1.0


def _form_folder(tmp_path: Path, form: Any) -> tuple[Path, FakeClient]:
    env = _FormEnv(FIVE[:4], form)
    client = FakeClient([CLICK, TWO, "DONE"])
    agent = PromptAgent.from_config(CONFIG, client=client)
    folder = tmp_path / form.__name__
    writer = ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15, clock=_clock())
    assert run_episode(agent, env, env.first(), writer, max_steps=15) == 1.0
    return folder, client


@pytest.mark.parametrize("form", [_memoryviews, _bytearrays, _utf16_tree])
def test_every_form_of_an_observation_gives_the_same_folder(tmp_path: Path, form: Any) -> None:
    """Screenshots and trees as memoryviews, bytearrays or UTF-16 bytes (all of which the
    agent reads) are written as the same observations given as bytes and str: every PNG and
    XML file, better_log's linearized trees and screenshot names, byte for byte."""
    expected, _ = _form_folder(tmp_path, _as_given)
    folder, _ = _form_folder(tmp_path, form)
    names = sorted(p.name for p in expected.iterdir())
    assert sum(name.endswith((".png", ".xml")) for name in names) == 10
    assert sorted(p.name for p in folder.iterdir()) == names
    for name in names:
        assert (folder / name).read_bytes() == (expected / name).read_bytes(), name
    steps = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))["steps"]
    assert all(step["a11y_tree"] and step["screenshot_file"] for step in steps)


NS = (
    'xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"'
)


def _declared(encoding: str, name: str) -> str:
    return (
        f'<?xml version="1.0" encoding="{encoding}"?><desktop-frame {NS}>'
        f'<push-button name="{name}" st:showing="true" st:visible="true" st:enabled="true" '
        'cp:screencoord="(10, 20)" cp:size="(80, 30)"/></desktop-frame>'
    )


@pytest.mark.parametrize(
    ("codec", "encoding", "name"),
    [
        ("latin-1", "ISO-8859-1", "Caf\xe9 \xfcber"),
        ("shift_jis", "Shift_JIS", "\u4fdd\u5b58\u3059\u308b"),
        ("utf-16", "UTF-16", "Caf\xe9 \u4fdd\u5b58"),
    ],
)
def test_a_tree_in_another_encoding_is_kept_as_the_text_the_model_saw(
    tmp_path: Path, codec: str, encoding: str, name: str
) -> None:
    """A tree handed over as bytes in its declared encoding is saved as the text the agent
    read, in UTF-8: the folder's steps rebuild to the requests sent, and it replays."""
    text = _declared(encoding, name)
    obs = {"screenshot": None, "accessibility_tree": text.encode(codec)}
    config = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")

    class Env:
        def step(
            self, action: Any, pause: float = 0
        ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
            return obs, 0.0, action == "DONE", {}

        def evaluate(self) -> float:
            return 1.0

    client = FakeClient([CLICK, "DONE"])
    agent = PromptAgent.from_config(config, client=client)
    folder = tmp_path / "out"
    writer = ResultWriter(folder, config=config, task=TASK, max_steps=15, clock=_clock())
    run_episode(agent, Env(), obs, writer, max_steps=15)
    assert (folder / "step_0.xml").read_bytes() == text.encode("utf-8")
    assert f"push-button\t{name}\t" in client.requests[0].messages[-1].text
    for number, sent in enumerate(client.requests, start=1):
        assert rebuild_step(folder, number).request.messages == sent.messages
    assert ReplayEnv(folder).reset()["accessibility_tree"] == text


def _kept_folder(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("traj.jsonl", "better_log.json", "result.txt"):
        (folder / name).write_text("precious\n", encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("flag", "value"),
    [("overwrite", "no"), ("overwrite", "false"), ("overwrite", 1), ("deferred", "yes")],
)
def test_the_writers_flags_take_only_a_bool_and_a_wrong_one_deletes_nothing(
    tmp_path: Path, flag: str, value: object
) -> None:
    """overwrite="no" was truthy and emptied a finished folder; now a ConfigError naming it."""
    before = _kept_folder(tmp_path)
    with pytest.raises(ConfigError, match=f"{flag} must be true or false; got"):
        ResultWriter(tmp_path, config=CONFIG, task=TASK, max_steps=5, **{flag: value})  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("directory", ["", "  "])
def test_an_empty_directory_is_refused_before_the_current_one_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory: str
) -> None:
    """ResultWriter("", overwrite=True) deleted every file in the current directory."""
    monkeypatch.chdir(tmp_path)
    for name in ("pyproject.toml", "README.md"):
        (tmp_path / name).write_text("precious\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="directory needs a path; got the empty path"):
        ResultWriter(directory, config=CONFIG, task=TASK, max_steps=5, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "pyproject.toml"]
    with pytest.raises(ConfigError, match="result_dir needs a path"):
        result_folder(directory, CONFIG, "os", "t")


@pytest.mark.parametrize("max_steps", [0, -1, True, "15", 2.0, None])
def test_max_steps_must_be_a_positive_int(tmp_path: Path, max_steps: object) -> None:
    """max_steps goes into better_log's params (the judge's input) as it is: "15" was written
    as a string; now anything but an int >= 1 is refused before the folder is touched."""
    before = _kept_folder(tmp_path)
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1; got"):
        ResultWriter(tmp_path, config=CONFIG, task=TASK, max_steps=max_steps, overwrite=True)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("instruction", None, "TaskInfo.instruction must be a string; got NoneType None"),
        ("instruction", b"do it", "TaskInfo.instruction must be a string; got bytes"),
        ("domain", " ", "TaskInfo.domain must be a non-empty string"),
        ("example_id", 5, "TaskInfo.example_id must be a non-empty string; got 5"),
        ("jailbreak", "false", "TaskInfo.jailbreak must be true or false; got str 'false'"),
        ("injection", "none", "TaskInfo.injection must be a mapping or None; got str 'none'"),
        ("injection", [("type", "x")], "TaskInfo.injection must be a mapping or None"),
    ],
)
def test_task_info_checks_what_goes_into_the_judges_input(
    field: str, value: object, message: str
) -> None:
    """Each TaskInfo field is checked when it is built (injection="none" gave a raw ValueError
    at the writer, instruction=None and jailbreak="false" went into better_log as they were)."""
    fields: dict[str, object] = {"instruction": "do it", "domain": "os", "example_id": "t"}
    fields[field] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        TaskInfo(**fields)  # type: ignore[arg-type]
    assert TaskInfo(instruction="do", domain="os", example_id="t", jailbreak=True).jailbreak
    assert TaskInfo(instruction=" ", domain="os", example_id="t").instruction == " "  # as prompts


def test_a_config_given_as_a_dict_names_agentconfig(tmp_path: Path) -> None:
    """result_folder and ResultWriter with a config's to_json say to build an AgentConfig."""
    with pytest.raises(TypeError, match=r"config must be an AgentConfig .*from_json"):
        result_folder(tmp_path, CONFIG.to_json(), "os", "t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be an AgentConfig"):
        ResultWriter(tmp_path, config=CONFIG.to_json(), task=TASK, max_steps=5)  # type: ignore[arg-type]
