"""A rebuilt step uses every setting that shaped its prompt, as the recording states it.

History length, tree budget, ubuntu attributes, the set-of-marks test and the
client password (kept only as "not the default") are recorded on each
trajectory.jsonl line and in better_log's `params`; `render --trajectory`
takes them over its flags and says so; older recordings still load.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.runs.episode import run_episode
from adapters.testing import FakeClient
from adapters.trajectories import jsonl, rebuild
from adapters.trajectories.jsonl import TrajectoryEntry, TrajectoryRecorder, parse_entry
from adapters.trajectories.osharm import (
    BETTER_LOG,
    ResultWriter,
    TaskInfo,
    result_folder,
)
from adapters.trajectories.rebuild import PROMPT_SETTINGS, load_recording, rebuild_step
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ServerLimits
from tests import strategies as s
from tests.facade.helpers import load

TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_save_notes")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
TAG_CLICK = "Clicking the first mark.\n```python\npyautogui.click(*tag_1)\n```"
#: The first one has ubuntu attributes, so `ubuntu_attributes` changes its table.
NAMES = ("chromium_settings_form", "mousepad_file_menu", "xfce4_terminal_shell")
SECRET = "osworld-public-evaluation"
#: The keys a line written before the prompt settings were recorded lacks.
NEWER_KEYS = ("max_trajectory_length", "a11y_tree_max_tokens", *jsonl.PROMPT_FLAGS)


@functools.cache
def _small_png(name: str) -> bytes:
    image = Image.open(io.BytesIO(load(name)["screenshot"]))  # type: ignore[arg-type]
    buffer = io.BytesIO()
    image.resize((480, 270)).save(buffer, format="PNG")
    return buffer.getvalue()


def _observation(name: str) -> dict[str, object]:
    return {**load(name), "screenshot": _small_png(name)}


def _config(**fields: Any) -> AgentConfig:
    return AgentConfig(model="gpt-4o", action_space="pyautogui", **fields)


def _reply(config: AgentConfig) -> str:
    return TAG_CLICK if config.observation_type == "som" else CLICK


def _jsonl_run(directory: Path, config: AgentConfig) -> tuple[Path, FakeClient]:
    """Three steps of `config` recorded into `directory`/run."""
    client = FakeClient([_reply(config)] * len(NAMES))
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(directory / "run")
    )
    for name in NAMES:
        agent.predict(TASK.instruction, _observation(name))
    return directory / "run", client


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 23, 12, 0, 0).replace(second=next(ticks) % 60)


def _folder_run(directory: Path, config: AgentConfig) -> tuple[Path, FakeClient]:
    """An episode of `config` written as an OS-Harm result folder (two steps, then DONE)."""
    observations = directory / "obs"
    observations.mkdir(parents=True)
    for number, name in enumerate(NAMES, start=1):
        (observations / f"{number:02d}_{name}.png").write_bytes(_small_png(name))
        (observations / f"{number:02d}_{name}.xml").write_text(
            str(load(name)["accessibility_tree"]), encoding="utf-8"
        )
    env = ReplayEnv(observations, instruction=TASK.instruction)
    client = FakeClient([_reply(config)] * 2 + ["DONE"])
    agent = PromptAgent.from_config(config, client=client)
    folder = result_folder(directory / "results", config, TASK.domain, TASK.example_id)
    writer = ResultWriter(folder, config=config, task=TASK, max_steps=15, clock=_clock())
    run_episode(agent, env, env.reset(), writer, max_steps=15)
    return folder, client


def _lines(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (path / jsonl.TRAJECTORY_FILE).read_text(encoding="utf-8").splitlines()
    ]


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (path / jsonl.TRAJECTORY_FILE).write_text(text, encoding="utf-8")


def _make_older(path: Path) -> None:
    """Rewrite a recording as one written before the prompt settings were recorded."""
    _write_lines(
        path, [{k: v for k, v in line.items() if k not in NEWER_KEYS} for line in _lines(path)]
    )


@settings(max_examples=12, deadline=None)
@given(config=s.prompt_configs(), folder=st.booleans())
def test_any_prompt_settings_rebuild_to_what_was_sent(config: AgentConfig, folder: bool) -> None:
    """Recorded with non-default settings, every step rebuilds from the recording alone (the
    password, never kept, given back), in either format."""
    with tempfile.TemporaryDirectory() as tmp:
        run = _folder_run if folder else _jsonl_run
        path, client = run(Path(tmp), config)
        recording = load_recording(path)
        assert recording.unstated == ()
        given_config = None
        if config.client_password != "password":
            assert recording.withheld == {"client_password"}
            with pytest.raises(TrajectoryError, match="client password of its own"):
                rebuild_step(recording, 1)
            given_config = attrs.evolve(
                AgentConfig(**recording.settings), client_password=config.client_password
            )
        for number, sent in enumerate(client.requests, start=1):
            rebuilt = rebuild_step(recording, number, given_config)
            assert rebuilt.request.messages == sent.messages, f"step {number}"
            assert rebuilt.config == config
        for file in Path(tmp).rglob("*"):
            if file.is_file():
                assert SECRET.encode() not in file.read_bytes(), file


def test_the_settings_change_the_prompt() -> None:
    """The settings the recordings now keep do change what is sent, here too."""
    base = _config(observation_type="a11y_tree")
    from osharm_core import AgentState, prepare_step

    def text(config: AgentConfig) -> str:
        step = prepare_step(config, AgentState(), "t", _observation(NAMES[0]))
        return "".join(m.text for m in step.messages)

    plain = text(base)
    for change in (
        {"a11y_tree_max_tokens": 40},
        {"ubuntu_attributes": True},
        {"client_password": SECRET},
    ):
        assert text(attrs.evolve(base, **change)) != plain, change


@settings(max_examples=60, deadline=None)
@given(entry=s.trajectory_entries(), stated=s.stated_settings())
def test_a_line_round_trips_with_or_without_its_prompt_settings(
    entry: Any, stated: dict[str, object]
) -> None:
    written = attrs.evolve(entry, **stated)
    line = json.dumps(written.to_json())
    assert parse_entry(line, written.step).unwrap() == written
    obj = json.loads(line)
    assert all(obj[k] is True for k in jsonl.PROMPT_FLAGS if k in obj)


def test_a_line_states_the_settings_only_a_default_run_needs(tmp_path: Path) -> None:
    """A default run's line carries the two counts, no flags and never the password."""
    path, _ = _jsonl_run(tmp_path, _config(observation_type="a11y_tree"))
    line = _lines(path)[0]
    assert (line["max_trajectory_length"], line["a11y_tree_max_tokens"]) == (3, 10000)
    assert not set(jsonl.PROMPT_FLAGS) & set(line)
    assert load_recording(path).settings["client_password"] == "password"


def test_an_older_recording_still_loads_and_rebuilds_with_the_given_settings(
    tmp_path: Path,
) -> None:
    config = _config(observation_type="a11y_tree", max_trajectory_length=1)
    path, client = _jsonl_run(tmp_path, config)
    _make_older(path)
    recording = load_recording(path)
    assert recording.unstated == PROMPT_SETTINGS
    assert recording.withheld == frozenset()
    assert all(e.max_trajectory_length is None for e in recording.entries)
    assert all(e.ubuntu_attributes is None for e in recording.entries)
    rebuilt = rebuild_step(
        recording, 3, AgentConfig(**{**recording.settings, "max_trajectory_length": 1})
    )
    assert rebuilt.request.messages == client.requests[2].messages
    # Without the setting it rebuilds with the default: the lines cannot say otherwise.
    assert rebuild_step(recording, 3).request.messages != client.requests[2].messages


def test_settings_changed_between_steps_are_followed(tmp_path: Path) -> None:
    """An agent's settings may change between steps; each step rebuilds under its own."""
    config = _config(observation_type="a11y_tree")
    client = FakeClient([CLICK] * 3)
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(tmp_path / "run")
    )
    agent.predict(TASK.instruction, _observation(NAMES[0]))
    agent.predict(TASK.instruction, _observation(NAMES[1]))
    agent.max_trajectory_length = 1
    agent.a11y_tree_max_tokens = 300
    agent.predict(TASK.instruction, _observation(NAMES[2]))
    assert [line["max_trajectory_length"] for line in _lines(tmp_path / "run")] == [3, 3, 1]
    for number, sent in enumerate(client.requests, start=1):
        assert rebuild_step(tmp_path / "run", number).request.messages == sent.messages
    assert rebuild_step(tmp_path / "run", 3).config.max_trajectory_length == 1


def test_a_configuration_contradicting_the_recording_is_refused(tmp_path: Path) -> None:
    config = _config(observation_type="a11y_tree", max_trajectory_length=2)
    path, _ = _jsonl_run(tmp_path, config)
    with pytest.raises(TrajectoryError, match="the recording says max_trajectory_length 2"):
        rebuild_step(path, 2, attrs.evolve(config, max_trajectory_length=3))
    with pytest.raises(TrajectoryError, match="default client password") as caught:
        rebuild_step(path, 2, attrs.evolve(config, client_password=SECRET))
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_trajectory_length", "3", "'max_trajectory_length' must be an integer >= 0"),
        ("max_trajectory_length", -1, "'max_trajectory_length' must be an integer >= 0"),
        ("a11y_tree_max_tokens", 0, "'a11y_tree_max_tokens' must be an integer >= 1"),
        ("ubuntu_attributes", "yes", "'ubuntu_attributes' must be bool"),
        ("custom_client_password", 1, "'custom_client_password' must be bool"),
    ],
)
def test_a_bad_setting_on_a_line_names_it(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    _write_lines(tmp_path, [{"response": "a"}, {"response": "b", key: value}])
    with pytest.raises(TrajectoryError, match=f"line 2: {message}"):
        load_recording(tmp_path)


# --- result folders ------------------------------------------------------------------


def test_a_folder_keeps_the_other_settings_in_params_only_when_set(tmp_path: Path) -> None:
    plain, _ = _folder_run(tmp_path / "plain", _config(observation_type="a11y_tree"))
    params = json.loads((plain / BETTER_LOG).read_text(encoding="utf-8"))["params"]
    assert not {"ubuntu_attributes", "som_test_original", "custom_client_password"} & set(params)
    config = _config(
        observation_type="som",
        max_trajectory_length=1,
        a11y_tree_max_tokens=300,
        ubuntu_attributes=True,
        som_test_original=True,
        client_password=SECRET,
    )
    folder, _ = _folder_run(tmp_path / "set", config)
    params = json.loads((folder / BETTER_LOG).read_text(encoding="utf-8"))["params"]
    assert (params["max_trajectory_length"], params["a11y_tree_max_tokens"]) == (1, 300)
    assert params["ubuntu_attributes"] is params["som_test_original"] is True
    assert params["custom_client_password"] is True
    recording = load_recording(folder)
    assert recording.withheld == {"client_password"}
    assert {k: recording.settings[k] for k in PROMPT_SETTINGS[:-1]} == {
        "max_trajectory_length": 1,
        "a11y_tree_max_tokens": 300,
        "ubuntu_attributes": True,
        "som_test_original": True,
    }


def test_a_folder_without_raw_trees_refuses_ubuntu_attributes(tmp_path: Path) -> None:
    """better_log keeps the tree linearized the reference's way: not the one sent."""
    config = _config(observation_type="a11y_tree", ubuntu_attributes=True)
    folder, client = _folder_run(tmp_path, config)
    assert rebuild_step(folder, 2).request.messages == client.requests[1].messages
    for xml in folder.glob("*.xml"):
        xml.unlink()
    with pytest.raises(TrajectoryError, match=r"step 1: .*ubuntu_attributes needs the raw tree"):
        rebuild_step(folder, 2)


def test_a_reference_folder_states_the_defaults(tmp_path: Path) -> None:
    """A folder whose params lack our extra keys ran the reference's way."""
    folder, client = _folder_run(tmp_path, _config(observation_type="a11y_tree"))
    recording = load_recording(folder)
    assert recording.unstated == ()
    assert recording.settings["ubuntu_attributes"] is False
    assert recording.settings["client_password"] == "password"
    assert rebuild_step(recording, 2).request.messages == client.requests[1].messages


@pytest.mark.parametrize(
    "key", ["ubuntu_attributes", "som_test_original", "custom_client_password"]
)
def test_a_bad_flag_in_params_is_a_clear_error(tmp_path: Path, key: str) -> None:
    folder, _ = _folder_run(tmp_path, _config(observation_type="a11y_tree"))
    log = json.loads((folder / BETTER_LOG).read_text(encoding="utf-8"))
    log["params"][key] = "yes"
    (folder / BETTER_LOG).write_text(json.dumps(log), encoding="utf-8")
    with pytest.raises(TrajectoryError, match=rf"params\.{key} must be true or false"):
        load_recording(folder)


# --- render --trajectory ---------------------------------------------------------------


def _texts(out: str) -> list[str]:
    return [m["content"][0]["text"] for m in json.loads(out)["messages"]]


def test_render_takes_the_recorded_settings_and_names_the_flags_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(
        observation_type="a11y_tree", max_trajectory_length=1, a11y_tree_max_tokens=300
    )
    path, client = _jsonl_run(tmp_path, config)
    argv = ["render", "--trajectory", str(path), "--step", "3", "--json"]
    argv += ["--max-trajectory-length", "2", "--a11y-tree-max-tokens", "300"]
    argv += ["--observation-type", "screenshot", "--client-password", SECRET]
    argv += ["--instruction", "something else"]  # was ignored without a word
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert _texts(captured.out) == [m.text for m in client.requests[2].messages]
    notes = captured.err.splitlines()
    assert notes == [
        "osharm-agent: note: the recording says observation_type 'a11y_tree'; "
        "--observation-type is not used",
        "osharm-agent: note: the recording says max_trajectory_length 1; "
        "--max-trajectory-length is not used",
        "osharm-agent: note: the recording says the run used the default client password; "
        "--client-password is not used",
        "osharm-agent: note: each step's instruction is the recording's; --instruction is not used",
    ]
    assert SECRET not in captured.out + captured.err


def test_render_of_an_older_recording_uses_the_flags_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, client = _jsonl_run(
        tmp_path, _config(observation_type="a11y_tree", max_trajectory_length=1)
    )
    _make_older(path)
    argv = ["render", "--trajectory", str(path), "--step", "3", "--json"]
    assert main([*argv, "--max-trajectory-length", "1"]) == 0
    captured = capsys.readouterr()
    assert _texts(captured.out) == [m.text for m in client.requests[2].messages]
    assert "does not state max_trajectory_length, a11y_tree_max_tokens, ubuntu_attributes" in (
        captured.err
    )


def test_render_needs_a_withheld_password_and_never_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, client = _jsonl_run(
        tmp_path, _config(observation_type="a11y_tree", client_password=SECRET)
    )
    argv = ["render", "--trajectory", str(path), "--step", "2", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "client password of its own" in err
    assert "--client-password" in err
    assert main([*argv, "--client-password", SECRET]) == 0
    captured = capsys.readouterr()
    assert _texts(captured.out) == [m.text for m in client.requests[1].messages]
    assert SECRET in captured.out  # the prompt names it, as it was sent
    assert SECRET not in captured.err
    assert "cannot be checked" in captured.err


def test_every_prompt_setting_is_kept_by_both_formats() -> None:
    """A new AgentConfig field that shapes the prompt must be recorded too: this list is it."""
    fields = {f.name for f in attrs.fields(AgentConfig)}
    assert set(PROMPT_SETTINGS) <= fields
    assert {f.name for f in attrs.fields(TrajectoryEntry)} >= set(NEWER_KEYS)


def test_a_cut_that_does_not_match_a_fully_stated_recording_blames_no_setting(
    tmp_path: Path,
) -> None:
    """With every setting stated, a size other than the one measured means the code changed."""
    config = _config(
        observation_type="a11y_tree", server_profile=ServerLimits(max_input_tokens=1500)
    )
    path, client = _jsonl_run(tmp_path, config)
    lines = _lines(path)
    cut = next(line for line in lines if "degradation" in line)
    assert (
        rebuild_step(path, cut["step"]).request.messages
        == client.requests[cut["step"] - 1].messages
    )
    cut["degradation"]["after"]["input_tokens"] += 1
    _write_lines(path, lines)
    with pytest.raises(TrajectoryError, match="states every setting that shapes the prompt"):
        rebuild_step(path, cut["step"])


def test_a_hostile_degradation_record_is_a_trajectory_error(tmp_path: Path) -> None:
    """A recorded size that is zero, a bool or past the largest frame side is refused on reading
    (file and line named); one larger than the screenshot it would resize is refused by
    rebuild_step naming the recording and the step, before anything is decoded or resampled."""
    config = _config(
        observation_type="screenshot_a11y_tree",
        server_profile=ServerLimits(max_images=1, max_bytes=15_000),
    )
    path, client = _jsonl_run(tmp_path, config)
    lines = _lines(path)
    cut = next(line for line in lines if (line.get("degradation") or {}).get("screenshot_size"))
    step = cut["step"]
    assert rebuild_step(path, step).request.messages == client.requests[step - 1].messages
    for bad in ([0, 5], [True, 7], [1 << 21, 5]):
        cut["degradation"]["screenshot_size"] = bad
        _write_lines(path, lines)
        with pytest.raises(TrajectoryError, match=f"line {step}: 'degradation': 'screenshot_size'"):
            rebuild_step(path, step)
    cut["degradation"]["screenshot_size"] = [1 << 20, 1 << 20]
    _write_lines(path, lines)
    with pytest.raises(
        TrajectoryError, match=rf"run, step {step}: .* 1048576 x 1048576 .*480 x 270"
    ):
        rebuild_step(path, step)


def test_the_cli_sets_the_two_flags_and_records_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--ubuntu-attributes` / `--som-test-original` reach the config; what `run` records with
    them rebuilds from the recording alone, and a recording made without them says so."""
    observations = tmp_path / "obs"
    observations.mkdir()
    for number, name in enumerate(NAMES, start=1):
        for part, ext in (("screenshot", ".png"), ("accessibility_tree", ".xml")):
            data = _observation(name)[part]
            target = observations / f"{number:02d}_{name}{ext}"
            if isinstance(data, bytes):
                target.write_bytes(data)
            else:
                target.write_text(str(data), encoding="utf-8")
    replies = tmp_path / "replies.jsonl"
    replies.write_text(
        "".join(json.dumps({"response": CLICK}) + "\n" for _ in NAMES), encoding="utf-8"
    )
    flags = ["--ubuntu-attributes", "--som-test-original"]
    common = ["--observation-type", "a11y_tree", "--instruction", TASK.instruction]
    run = ["run", str(observations), "--model", f"replay:{replies}", *common]
    assert main([*run, "--out", str(tmp_path / "on"), *flags]) == 0
    assert main([*run, "--out", str(tmp_path / "off")]) == 0
    capsys.readouterr()
    lines = [
        json.loads(line)
        for line in (tmp_path / "on/trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert all(line["ubuntu_attributes"] and line["som_test_original"] for line in lines)

    render = ["render", "--trajectory", "--step", "1", "--json", *common]
    render[2:2] = [str(tmp_path / "on")]
    assert main(render) == 0
    with_flags = capsys.readouterr()
    assert with_flags.err == ""
    render[2] = str(tmp_path / "off")
    assert main([*render, *flags]) == 0
    without = capsys.readouterr()
    assert _texts(without.out) != _texts(with_flags.out)  # the first tree has ubuntu attributes
    assert without.err.splitlines() == [
        "osharm-agent: note: the recording says ubuntu_attributes False; "
        "--ubuntu-attributes is not used",
        "osharm-agent: note: the recording says som_test_original False; "
        "--som-test-original is not used",
    ]


def _tiny_tree(number: int) -> str:
    return (
        '<desktop-frame><application name="app"><push-button name="Button '
        f'{number}" showing="true" visible="true" screencoord="(10, 20)" size="(30, 40)"/>'
        "</application></desktop-frame>"
    )


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A 120-step run whose history length changes between steps (3, 1, 7, 0, 2, ...), with
    clicks, thoughts (no action) and DONE among its replies; the requests it sent."""
    folder = tmp_path_factory.mktemp("long-run")
    replies = [(CLICK, "Thinking it over.", "WAIT")[n % 3] for n in range(119)] + ["DONE"]
    client = FakeClient(replies)
    config = _config(observation_type="a11y_tree")
    agent = PromptAgent.from_config(config, client=client, recorder=TrajectoryRecorder(folder))
    lengths = itertools.cycle((3, 1, 7, 0, 2, 5))
    for number in range(len(replies)):
        if number % 10 == 0:
            agent.max_trajectory_length = next(lengths)
        agent.predict(TASK.instruction, {"accessibility_tree": _tiny_tree(number)})
    return load_recording(folder), client.requests


def test_a_long_run_rebuilds_byte_for_byte_with_only_the_turns_it_shows(
    long_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuilt step keeps only the turns any step of it shows (the most `max_trajectory_length`
    its steps state), so its cost does not grow with the history before it (it re-checked
    every earlier turn per step: 4,000 steps took 27 s); the messages are those sent."""
    recording, sent = long_run
    assert {e.max_trajectory_length for e in recording.entries} == {0, 1, 2, 3, 5, 7}
    held: list[int] = []
    real = rebuild.complete_step

    def watched(config: AgentConfig, state: Any, *args: Any, **kwargs: Any) -> Any:
        held.append(len(state))
        return real(config, state, *args, **kwargs)

    monkeypatch.setattr(rebuild, "complete_step", watched)
    for number in (1, 2, 4, 11, 35, 41, 77, 100, 119, 120):
        held.clear()
        assert rebuild_step(recording, number).request.messages == sent[number - 1].messages
        assert max(held, default=0) <= 7
