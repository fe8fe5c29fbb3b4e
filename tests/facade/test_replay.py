"""Replay: reading trajectory lines, ReplayClient, and ReplayEnv over real observation folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from returns.result import Failure, Success

from adapters.contract import ModelRequest, Usage
from adapters.errors import ModelCallError, ReplayExhausted, TrajectoryError
from adapters.registry import client_for
from adapters.trajectories.jsonl import TrajectoryEntry, parse_entry, read_trajectory
from adapters.trajectories.replay import ReplayClient, ReplayEnv, is_terminal, observation_names
from osharm_core import ConfigError, Continuation
from tests import strategies as s
from tests.conftest import OBSERVATIONS
from tests.facade.helpers import SMALL, observation_folder


def _request() -> ModelRequest:
    return ModelRequest(model="replay:x", messages=())


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


# --- trajectory lines ------------------------------------------------------------


@given(s.any_text)
def test_parse_entry_never_raises(text: str) -> None:
    """Any text gives a Success or a Failure with a message, never an exception."""
    result = parse_entry(text)
    assert isinstance(result, Success | Failure)


@given(s.trajectory_entries())
def test_entry_round_trips_through_json(entry: TrajectoryEntry) -> None:
    """Writing an entry as a JSON line and parsing it back gives the same entry."""
    line = json.dumps(entry.to_json(), ensure_ascii=False)
    assert parse_entry(line).unwrap() == entry


def test_only_the_response_is_required() -> None:
    """A hand-written `{"response": ...}` line is valid; the step number comes from its position."""
    entry = parse_entry('{"response": "DONE"}', 7).unwrap()
    assert (entry.step, entry.response, entry.actions, entry.usage) == (7, "DONE", None, Usage())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"response": 3}', "'response'"),
        ('{"response": "x", "actions": "click"}', "'actions' must be a list"),
        ('{"response": "x", "actions": [3]}', "'actions' items"),
        ('{"response": "x", "usage": {"input_tokens": "many"}}', "usage.input_tokens"),
        ('{"response": "x", "masks": [[1, 2, 3]]}', "'masks' items"),
        ('{"response": "x", "tries": true}', "'tries'"),
        ('{"response": "x", "continuation": {"call_ids": []}}', "'continuation'"),
        ('{"response": "x", "screenshot": 5}', "'screenshot'"),
        ('{"response": "x", "reply_frame": {"grid": "pixels"}}', "'reply_frame'"),
    ],
)
def test_malformed_lines_say_what_is_wrong(line: str, message: str) -> None:
    """Each kind of malformed line is a Failure whose message names the bad field."""
    result = parse_entry(line)
    assert isinstance(result, Failure)
    assert message in result.failure()


def test_read_trajectory_names_file_and_line(tmp_path: Path) -> None:
    """A malformed line raises TrajectoryError with the file and the line number; blank lines are skipped."""
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"response": "a"}\n\n{"response": 1}\n', encoding="utf-8")
    with pytest.raises(TrajectoryError, match=r"trajectory.jsonl, line 3: 'response'"):
        read_trajectory(path)


def test_read_trajectory_rejects_missing_and_empty_files(tmp_path: Path) -> None:
    """A missing file and a file with no steps are clear TrajectoryErrors."""
    with pytest.raises(TrajectoryError, match="no trajectory file"):
        read_trajectory(tmp_path / "nope.jsonl")
    (tmp_path / "trajectory.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(TrajectoryError, match="holds no steps"):
        read_trajectory(tmp_path)


# --- ReplayClient ----------------------------------------------------------------


def test_replay_client_answers_in_order_with_recorded_usage(tmp_path: Path) -> None:
    """Replies come back in order with the recorded usage, model and continuation, and tries=1."""
    path = _write(
        tmp_path / "t.jsonl",
        {"response": "one", "model": "gpt-4o", "usage": {"input_tokens": 10, "output_tokens": 2}},
        {
            "response": "two",
            "response_model": "cua-2025",
            "tries": 4,
            "continuation": {"response_id": "resp_1", "call_ids": ["c1"], "safety_checks": []},
        },
    )
    client = ReplayClient(path)
    first, second = client.complete(_request()), client.complete(_request())
    assert (first.text, first.model, first.tries) == ("one", "gpt-4o", 1)
    assert first.usage == Usage(input_tokens=10, output_tokens=2)
    assert (second.text, second.model, second.tries) == ("two", "cua-2025", 1)
    assert second.continuation == Continuation("resp_1", ("c1",))


def test_replay_client_runs_out_with_a_typed_error(tmp_path: Path) -> None:
    """Past the last reply, ReplayExhausted (a ModelCallError) says how many replies there were."""
    client = ReplayClient(_write(tmp_path / "t.jsonl", {"response": "only"}))
    client.complete(_request())
    with pytest.raises(ReplayExhausted, match="holds 1 replies") as caught:
        client.complete(_request())
    assert isinstance(caught.value, ModelCallError)


@pytest.mark.anyio
async def test_replay_client_async_matches_sync(tmp_path: Path) -> None:
    """acomplete walks the same recorded replies as complete."""
    client = ReplayClient(_write(tmp_path / "t.jsonl", {"response": "a"}, {"response": "b"}))
    assert (await client.acomplete(_request())).text == "a"
    assert client.complete(_request()).text == "b"


def test_client_for_resolves_replay_paths(tmp_path: Path) -> None:
    """`client_for("replay:PATH")` gives a ReplayClient for a file or for its directory."""
    _write(tmp_path / "trajectory.jsonl", {"response": "hi"})
    for spec in (f"replay:{tmp_path}", f"replay:{tmp_path / 'trajectory.jsonl'}"):
        client = client_for(spec)
        assert isinstance(client, ReplayClient)
        assert client.complete(_request()).text == "hi"
    with pytest.raises(TrajectoryError, match="no trajectory file"):
        client_for(f"replay:{tmp_path / 'missing.jsonl'}")


# --- ReplayEnv ---------------------------------------------------------------------


def test_observation_names_sort_and_skip_marks(tmp_path: Path) -> None:
    """Stems are served in sorted order; `*_som.png` images and other files are not observations."""
    folder = observation_folder(tmp_path / "obs")
    (folder / "01_mousepad_notes_som.png").write_bytes(b"x")
    (folder / "notes.txt").write_text("x", encoding="utf-8")
    assert observation_names(folder) == tuple(f"{i:02d}_{n}" for i, n in enumerate(SMALL, 1))


def test_a_result_folder_is_served_in_step_order_not_name_order(tmp_path: Path) -> None:
    """`step_10_...` follows `step_9_...` (it sorted between `step_1_...` and `step_2_...` as
    text) and a step's files follow their time stamps; a folder with any other name is served
    in name order, ties broken by name, so every run sees the same order."""
    folder = tmp_path / "result"
    folder.mkdir()
    (folder / "better_log.json").write_text("{}", encoding="utf-8")
    stems = ["step_0"]
    for step in range(1, 13):
        stems.append(f"step_{step}_20261126@1200{step:02d}")
    stems.insert(3, "step_3_20261126@120002")  # two actions in step 3, the earlier one first
    for stem in stems:
        (folder / f"{stem}.xml").write_text("<desktop-frame/>", encoding="utf-8")
    assert observation_names(folder, follow_links=False) == tuple(stems)
    assert ReplayEnv(folder).names == tuple(stems)
    # A stray file in a result folder keeps the steps in step order, and comes after them.
    (folder / "notes.png").write_bytes(b"")
    assert ReplayEnv(folder).names == (*stems, "notes")
    mixed = tmp_path / "mine"
    mixed.mkdir()
    for stem in ("step_2", "start", "step_10", "step_01", "step_1"):
        (mixed / f"{stem}.xml").write_text("<desktop-frame/>", encoding="utf-8")
    assert observation_names(mixed) == ("start", "step_01", "step_1", "step_10", "step_2")
    (mixed / "start.xml").unlink()
    assert observation_names(mixed) == ("step_01", "step_1", "step_2", "step_10")


def test_env_serves_real_observations_in_order(tmp_path: Path) -> None:
    """reset gives the first observation; each step gives the next; running out ends the episode."""
    env = ReplayEnv(observation_folder(tmp_path / "obs"), instruction="do it")
    first = env.reset()
    assert first["screenshot"] == (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    assert first["accessibility_tree"] == (OBSERVATIONS / "mousepad_notes.xml").read_text("utf-8")
    assert first["instruction"] == "do it"
    assert env._get_obs() is first
    obs, reward, done, info = env.step("pyautogui.click(1, 2)", 0.5)
    assert obs["accessibility_tree"] == (OBSERVATIONS / "mousepad_file_menu.xml").read_text("utf-8")
    assert (reward, done, info["step"]) == (0.0, False, 1)
    env.step({"action_type": "CLICK"})
    obs, _, done, info = env.step("WAIT")
    assert done
    assert info["observation"] == f"03_{SMALL[2]}"
    assert env.actions == ["pyautogui.click(1, 2)", {"action_type": "CLICK"}, "WAIT"]


@pytest.mark.parametrize(
    "final", ["DONE", "FAIL", {"action_type": "DONE"}, {"action_type": "FAIL"}]
)
def test_done_and_fail_end_the_episode_without_moving(tmp_path: Path, final: object) -> None:
    """DONE and FAIL, as strings or computer_13 dicts, end the episode on the current observation."""
    env = ReplayEnv(observation_folder(tmp_path / "obs"))
    env.reset()
    _, _, done, info = env.step(final)  # type: ignore[arg-type]
    assert done
    assert info["observation"] == f"01_{SMALL[0]}"
    assert is_terminal(final)


def test_evaluate_is_unscored_without_an_evaluator_and_uses_one(tmp_path: Path) -> None:
    """With no evaluator nothing judged the episode (None, not a made-up 0.0); an evaluator
    scores the actions taken; reset clears them."""
    folder = observation_folder(tmp_path / "obs")
    assert ReplayEnv(folder).evaluate() is None
    env = ReplayEnv(folder, evaluator=lambda actions: float(list(actions) == ["DONE"]))
    env.reset()
    env.step("DONE")
    assert env.evaluate() == 1.0
    env.reset()
    assert (env.actions, env.done, env.evaluate()) == ([], False, 0.0)


def test_env_rejects_missing_and_empty_folders(tmp_path: Path) -> None:
    """A missing folder and a folder with no observations are clear errors."""
    with pytest.raises(TrajectoryError, match="no observation directory"):
        ReplayEnv(tmp_path / "missing")
    with pytest.raises(TrajectoryError, match="holds no observations"):
        ReplayEnv(tmp_path)


@pytest.mark.parametrize("per_turn", ["false", 1, None])
def test_per_turn_takes_only_a_bool(tmp_path: Path, per_turn: object) -> None:
    """per_turn="false" would pace the replay per turn; anything but a bool is a ConfigError."""
    with pytest.raises(ConfigError, match="per_turn must be true or false"):
        ReplayEnv(observation_folder(tmp_path / "obs"), per_turn=per_turn)  # type: ignore[arg-type]


def test_an_empty_directory_is_not_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReplayEnv("") served the current directory's files; now a ConfigError naming it."""
    observation_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="directory needs a path"):
        ReplayEnv("")
