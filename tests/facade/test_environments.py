"""The environment contract: ReplayEnv and a wrapped DesktopEnv-shaped object, sync and async."""

from __future__ import annotations

import asyncio
import gzip
import json
import pickle
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters import (
    AsyncEnv,
    DesktopEnvAdapter,
    Env,
    EnvironmentFailure,
    OSWorldServerEnv,
    in_thread,
)
from adapters.agent import PromptAgent
from adapters.errors import TrajectoryExistsError
from adapters.runs import load_task_list, run_task_list, vm_http
from adapters.runs.environments import PYAUTOGUI_PREFIX
from adapters.runs.episode import run_episode
from adapters.runs.vm_http import VmUnanswered
from adapters.runs.vm_setup import ServerSetup
from adapters.testing import FakeClient
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ConfigError
from tests.adapters.loopback import LoopbackServer, Reply
from tests.facade.helpers import load, observation_folder

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")


class FakeDesktopEnv:
    """Shaped like OSWorld's DesktopEnv: reset(task_config=...), step(action, pause), evaluate, close."""

    def __init__(self, **overrides: Any) -> None:
        self.overrides = overrides
        self.executed: list[Any] = []
        self.configs: list[Any] = []
        self.closed = False

    def reset(self, task_config: Any = None, **_: Any) -> Any:
        self.configs.append(task_config)
        return self.overrides.get("reset", load("mousepad_notes"))

    def step(self, action: Any, pause: float = 2) -> Any:
        self.executed.append(action)
        done = action in ("DONE", "FAIL")
        return self.overrides.get("step", (load("mousepad_file_menu"), 0, done, {"ok": True}))

    def evaluate(self) -> Any:
        return self.overrides.get("evaluate", 1)

    def close(self) -> None:
        self.closed = True


def test_replay_env_and_a_wrapped_desktop_env_meet_the_contract(tmp_path: Path) -> None:
    assert isinstance(ReplayEnv(observation_folder(tmp_path / "obs")), Env)
    assert isinstance(DesktopEnvAdapter(FakeDesktopEnv()), Env)
    assert isinstance(in_thread(DesktopEnvAdapter(FakeDesktopEnv())), AsyncEnv)


def test_the_adapter_passes_calls_through_and_normalises_results() -> None:
    desktop = FakeDesktopEnv()
    env = DesktopEnvAdapter(desktop)
    assert env.reset({"id": "x"})["accessibility_tree"]
    obs, reward, done, info = env.step("pyautogui.click(1, 2)", 0.5)
    assert (reward, done, info) == (0.0, False, {"ok": True})
    assert isinstance(obs["screenshot"], bytes)
    assert env.evaluate() == 1.0
    env.close()
    assert desktop.closed
    assert desktop.configs == [{"id": "x"}]


class SettlingDesktopEnv(FakeDesktopEnv):
    """A DesktopEnv whose desktop changes after reset (the setup's apps open), seen by _get_obs."""

    def _get_obs(self) -> Any:
        return load("mousepad_file_menu")


def test_the_adapter_lets_the_desktop_settle_after_reset_then_observes_again() -> None:
    slept: list[float] = []
    env = DesktopEnvAdapter(SettlingDesktopEnv(), settle=5, sleep=slept.append)
    assert env.reset({"id": "x"}) == load("mousepad_file_menu")
    assert slept == [5.0]
    right_away = DesktopEnvAdapter(SettlingDesktopEnv(), settle=0, sleep=slept.append)
    assert right_away.reset({"id": "x"}) == load("mousepad_notes")
    assert slept == [5.0]
    for bad in (-1, 1e9, True, "10"):
        with pytest.raises(ConfigError, match="settle must be a number of seconds"):
            DesktopEnvAdapter(SettlingDesktopEnv(), settle=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"reset": "a string"}, "reset returned str"),
        ({"reset": {"screenshot": "base64 text"}}, "'screenshot' is str"),
        ({"step": (None, 0.0, False)}, r"\(observation, reward, done, info\)"),
        ({"step": ({}, "zero", False, {})}, "reward is str"),
        ({"evaluate": "great"}, "evaluate returned str"),
        # Not finite: result.txt would say `nan` and the task count as done; traj.jsonl is
        # strict JSON, so the step's line could not be written.
        ({"evaluate": float("nan")}, r"^evaluate returned nan, not a finite number$"),
        ({"evaluate": float("-inf")}, r"^evaluate returned -inf, not a finite number$"),
        ({"evaluate": 10**400}, r"^evaluate returned 1000.*\(401 characters\), not a finite"),
        ({"step": ({}, float("nan"), False, {})}, r"^step: reward is nan, not a finite number$"),
        ({"step": ({}, float("inf"), False, {})}, r"^step: reward is inf, not a finite number$"),
        (
            {"step": ({}, 0, False, {"x": [float("inf")]})},
            r"^step: info cannot be written as JSON: Out of range float",
        ),
        (
            {"step": ({}, 0, False, {"x": {1, 2}})},
            r"^step: info cannot be written as JSON: Object of type set",
        ),
    ],
)
def test_a_misbehaving_environment_is_a_typed_error(override: dict[str, Any], message: str) -> None:
    env = DesktopEnvAdapter(FakeDesktopEnv(**override))

    def drive() -> None:
        env.reset()
        env.step("WAIT")
        env.evaluate()

    with pytest.raises(EnvironmentFailure, match=message):
        drive()


def test_an_info_nested_too_deeply_for_the_record_is_a_typed_error() -> None:
    """Writing the step's line, from deeper in the stack, might raise a RecursionError."""
    deep: list[Any] = []
    for _ in range(200):
        deep = [deep]
    info = {"x": deep}
    env = DesktopEnvAdapter(FakeDesktopEnv(step=(load("mousepad_notes"), 0, False, info)))
    with pytest.raises(EnvironmentFailure, match=r"^step: info is nested more than 32 levels"):
        env.step("WAIT")


def test_the_async_form_drives_an_episode_without_blocking_the_loop() -> None:
    desktop = FakeDesktopEnv()
    env = in_thread(DesktopEnvAdapter(desktop))

    async def episode() -> float | None:
        obs = await env.reset()
        agent = PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"]))
        _, actions = await agent.apredict("task", obs)
        for action in actions or ():
            await env.step(action)
        score = await env.evaluate()
        await env.close()
        return score

    assert asyncio.run(episode()) == 1.0
    assert desktop.executed == ["DONE"]
    assert desktop.closed


def test_a_task_list_runs_on_wrapped_desktop_envs(tmp_path: Path) -> None:
    examples = tmp_path / "examples" / "os"
    examples.mkdir(parents=True)
    (examples / "_one.json").write_text(
        '{"id": "_one", "instruction": "Do it", "config": []}', encoding="utf-8"
    )
    (tmp_path / "meta.json").write_text('{"os": ["_one"]}', encoding="utf-8")
    tasks = load_task_list(tmp_path / "meta.json", tmp_path / "examples")
    desktops: list[FakeDesktopEnv] = []

    def make_env(_: object) -> DesktopEnvAdapter:
        desktops.append(FakeDesktopEnv())
        return DesktopEnvAdapter(desktops[-1])

    click = "```python\npyautogui.click(19, 31)\n```"
    outcomes = run_task_list(
        tasks,
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=lambda _: PromptAgent.from_config(CONFIG, client=FakeClient([click, "DONE"])),
        make_env=make_env,
        max_steps=5,
    )
    assert [(o.status, o.score) for o in outcomes] == [("finished", 1.0)]
    assert desktops[0].executed == ["pyautogui.click(19, 31)", "DONE"]
    assert desktops[0].configs == [{"id": "_one", "instruction": "Do it", "config": []}]
    folder = result_folder(tmp_path / "results", CONFIG, "os", "_one")
    assert [e.response for e in load_result_folder(folder)] == [click, "DONE"]
    # The reference writes what DesktopEnv gives: its int 1 as "1", its reward 0 as 0.
    assert (folder / "result.txt").read_text(encoding="utf-8") == "1\n"
    rewards = [
        json.loads(line)["reward"]
        for line in (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert rewards == [0, 0]
    assert all(type(r) is int for r in rewards)


# --- the OSWorld VM server client against a loopback server -------------------------


#: What the loopback VM server sends as its screen recording.
VIDEO = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 64


@pytest.fixture
def vm_server() -> Iterator[LoopbackServer]:
    """A loopback server answering OSWorld's /screenshot, /accessibility and /execute."""
    with LoopbackServer() as server:
        yield serve_vm(server)


def serve_vm(server: LoopbackServer) -> LoopbackServer:
    """`server` answering as an OSWorld VM's server (a desktop showing mousepad's notes)."""
    notes = load("mousepad_notes")
    server.route(
        "GET",
        r"/screenshot",
        lambda _: Reply(200, notes["screenshot"], {"content-type": "image/png"}),
    )
    server.route(
        "GET", r"/accessibility", lambda _: Reply(200, {"AT": notes["accessibility_tree"]})
    )
    server.route(
        "POST",
        r"/execute",
        lambda _: Reply(200, {"status": "success", "output": "", "error": "", "returncode": 0}),
    )
    server.route("POST", r"/start_recording", lambda _: Reply(200, {"status": "ok"}))
    server.route(
        "POST", r"/end_recording", lambda _: Reply(200, VIDEO, {"content-type": "video/mp4"})
    )
    return server


def test_the_vm_server_client_observes_and_executes(vm_server: LoopbackServer) -> None:
    slept: list[float] = []
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, sleep=slept.append)
    assert isinstance(env, Env)
    obs = env.reset({"id": "x", "config": []})
    assert obs["screenshot"] == load("mousepad_notes")["screenshot"]
    assert obs["accessibility_tree"] == load("mousepad_notes")["accessibility_tree"]
    _, reward, done, info = env.step("pyautogui.click(19, 31)", 0.5)
    assert (reward, done, info["execute"]["returncode"]) == (0.0, False, 0)
    (execute,) = [r for r in vm_server.requests if r.path == "/execute"]
    assert execute.json() == {
        "command": ["python", "-c", PYAUTOGUI_PREFIX + "pyautogui.click(19, 31)"],
        "shell": False,
    }
    assert env.step("WAIT", 2.0)[2] is False
    assert env.step("DONE")[2] is True
    assert slept == [0.5, 2.0]
    assert len([r for r in vm_server.requests if r.path == "/execute"]) == 1
    assert env.evaluate() is None
    env.close()


def test_the_vm_server_client_refuses_what_it_cannot_do(vm_server: LoopbackServer) -> None:
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, retries=1)
    with pytest.raises(EnvironmentFailure, match="chrome_open_tabs needs Chrome DevTools"):
        env.reset({"config": [{"type": "launch"}, {"type": "chrome_open_tabs"}]})
    assert "bad computer_13 action" in env.step({"action_type": "CLICK", "x": 1})[3]["error"]
    vm_server.enqueue(Reply(500, b"boom"))
    with pytest.raises(EnvironmentFailure, match="GET /screenshot: HTTP 500"):
        env.observe()
    vm_server.enqueue(Reply(200, b"not a png"))
    with pytest.raises(EnvironmentFailure, match="did not return a PNG"):
        env.observe()
    env.close()


def test_an_episode_runs_on_the_vm_server_into_an_osharm_folder(
    vm_server: LoopbackServer, tmp_path: Path
) -> None:
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, sleep=lambda _: None)
    agent = PromptAgent.from_config(
        CONFIG, client=FakeClient(["```python\npyautogui.click(19, 31)\n```", "DONE"])
    )
    folder = tmp_path / "task"
    writer = ResultWriter(
        folder,
        config=CONFIG,
        task=TaskInfo(instruction="Open the menu", domain="os", example_id="x"),
        max_steps=5,
    )
    assert run_episode(agent, env, env.reset(), writer, max_steps=5) is None
    assert [e.response for e in load_result_folder(folder)][-1] == "DONE"
    assert not (folder / "result.txt").exists()  # no score from a bare VM server
    env.close()


def test_the_vm_server_client_records_the_screen(vm_server: LoopbackServer, tmp_path: Path) -> None:
    """start_recording / end_recording as OSWorld's controller calls them; the video streamed to disk."""
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0)
    env.start_recording()
    saved = env.end_recording(tmp_path / "recording.mp4")
    assert saved.read_bytes() == VIDEO
    assert [r.path for r in vm_server.requests] == ["/start_recording", "/end_recording"]
    small = OSWorldServerEnv(vm_server.base_url, timeout=5.0, max_recording_bytes=1000)
    with pytest.raises(EnvironmentFailure, match="max_recording_bytes"):
        small.end_recording(tmp_path / "big.mp4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recording.mp4"]
    env.close()
    small.close()


def test_with_recording_set_an_episode_saves_its_video_at_close(
    vm_server: LoopbackServer, tmp_path: Path
) -> None:
    target = tmp_path / "task" / "recording.mp4"
    target.parent.mkdir()
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, recording=target)
    env.reset({"id": "x", "config": []})
    env.step("DONE")
    assert not target.exists()
    env.close()
    assert target.read_bytes() == VIDEO
    assert [r.path for r in vm_server.requests].count("/start_recording") == 1


@pytest.mark.parametrize("dangling", [True, False])
def test_a_link_left_at_the_recording_s_part_name_is_not_written_through(
    vm_server: LoopbackServer, tmp_path: Path, dangling: bool
) -> None:
    """The video went to `recording.mp4.part` opened with `open("wb")`, so a link there (one an
    overwrite used to leave) sent it to the link's target; the link is now removed first and
    the part file made new."""
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious", encoding="utf-8")
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "recording.mp4.part").symlink_to(victim)
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0)
    assert env.end_recording(folder / "recording.mp4").read_bytes() == VIDEO
    assert victim.exists() != dangling
    if not dangling:
        assert victim.read_text(encoding="utf-8") == "precious"
    assert [p.name for p in folder.iterdir()] == ["recording.mp4"]
    assert not (folder / "recording.mp4").is_symlink()
    env.close()


def test_an_overwrite_removes_links_from_the_result_folder_never_their_targets(
    tmp_path: Path,
) -> None:
    """A redo kept only what `is_file()` saw, so a dangling link survived it (and the video or
    a step file could later go to its target); links are now removed like files, their
    targets left alone, and without `overwrite` a folder holding only a link is refused."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    folder = tmp_path / "result"
    folder.mkdir()
    (folder / "recording.mp4.part").symlink_to(tmp_path / "made")
    (folder / "step_0.png").symlink_to(victim)
    task = TaskInfo(instruction="x", domain="d", example_id="i")
    with pytest.raises(TrajectoryExistsError):
        ResultWriter(folder, config=CONFIG, task=task, max_steps=1)
    ResultWriter(folder, config=CONFIG, task=task, max_steps=1, overwrite=True)
    assert list(folder.iterdir()) == []
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (tmp_path / "made").exists()


def test_a_failing_recording_endpoint_is_an_environment_failure(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        server.route("POST", r"/.*_recording", lambda _: Reply(500, {"error": "no ffmpeg"}))
        env = OSWorldServerEnv(server.base_url, timeout=5.0)
        with pytest.raises(EnvironmentFailure, match="POST /start_recording: HTTP 500"):
            env.start_recording()
        with pytest.raises(EnvironmentFailure, match="POST /end_recording: HTTP 500"):
            env.end_recording(tmp_path / "r.mp4")
        assert list(tmp_path.iterdir()) == []
        env.close()
        # At reset, a start that fails is noted and the episode runs unrecorded.
        serve_vm(server)
        server.route("POST", r"/.*_recording", lambda _: Reply(500, {"error": "no ffmpeg"}))
        recorded = OSWorldServerEnv(server.base_url, timeout=5.0, recording=tmp_path / "r.mp4")
        assert recorded.reset({"id": "x"})["screenshot"]
        assert recorded.recording_problem == "POST /start_recording: HTTP 500"
        recorded.close()
        assert list(tmp_path.iterdir()) == []


def test_a_hostile_vm_server_cannot_fill_memory(vm_server: LoopbackServer) -> None:
    """Answers past max_answer_bytes stop there: declared, streamed with no length, or a
    compression bomb; each is an EnvironmentFailure naming the call."""
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, max_answer_bytes=100_000, retries=1)
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 200_000
    vm_server.enqueue(Reply(200, png, {"content-type": "image/png"}), path="/screenshot")
    with pytest.raises(
        EnvironmentFailure, match=r"GET /screenshot: .*declares 200008 bytes.*max_answer_bytes"
    ):
        env.observe()
    endless = Reply(200, stream=lambda: (b"\x89PNG\r\n\x1a\n" + b"\0" * 1000 for _ in range(10**6)))
    vm_server.enqueue(endless, path="/screenshot")
    with pytest.raises(EnvironmentFailure, match=r"GET /screenshot: .*max_answer_bytes"):
        env.observe()
    bomb = gzip.compress(b'{"AT": "' + b"a" * 50_000_000 + b'"}')
    vm_server.enqueue(Reply(200, bomb, {"content-encoding": "gzip"}), path="/accessibility")
    with pytest.raises(EnvironmentFailure, match=r"GET /accessibility: .*decompresses past"):
        env.observe()
    vm_server.enqueue(Reply(200, b'{"output": "' + b"x" * 200_000 + b'"}'), path="/execute")
    with pytest.raises(EnvironmentFailure, match=r"POST /execute: .*max_answer_bytes"):
        env.execute("pyautogui.click(1, 2)")
    vm_server.enqueue(Reply(200, b"x" * 200_000), path="/setup/launch")
    launch = {"type": "launch", "parameters": {"command": ["gedit"]}}
    with pytest.raises(EnvironmentFailure, match=r"config\[0\] \(launch\): POST /setup/launch: "):
        env.reset({"config": [launch]})
    assert env.observe()["screenshot"] == load("mousepad_notes")["screenshot"]  # still usable
    env.close()
    for name in ("max_answer_bytes", "max_download_bytes", "max_recording_bytes"):
        with pytest.raises(ConfigError, match=f"{name} must be an integer >= 1"):
            OSWorldServerEnv(vm_server.base_url, **{name: 0})


@pytest.mark.parametrize(
    ("password", "problem"),
    [
        (None, "a NoneType"),
        (12345, "a int"),
        ("", "an empty string"),
        ("two\nlines", "a string of 9 characters holding a line break or a backtick"),
    ],
)
def test_a_client_password_agentconfig_would_refuse_is_refused_at_construction(
    password: object, problem: str
) -> None:
    """client_password=None was taken, and a task whose setup uses {CLIENT_PASSWORD} failed with
    a raw TypeError; now AgentConfig's rule, a ConfigError that never shows the value."""
    with pytest.raises(
        ConfigError,
        match=f"^client_password must be a non-empty one-line string without backticks; got {problem}$",
    ):
        OSWorldServerEnv("http://127.0.0.1:9", client_password=password)  # type: ignore[arg-type]
    with httpx.Client() as http, pytest.raises(ConfigError, match="client_password must be"):
        ServerSetup("http://127.0.0.1:9", http, client_password=password)  # type: ignore[arg-type]


def test_an_empty_recording_path_is_refused(tmp_path: Path) -> None:
    """recording="" would have saved the video as the current directory."""
    with pytest.raises(ConfigError, match="recording needs a path; got the empty path"):
        OSWorldServerEnv("http://127.0.0.1:9", recording="")


@pytest.mark.parametrize(
    "timeout",
    [0, -1, float("nan"), float("inf"), 1e9, 10**400, None, "5", True, httpx.Timeout(5.0)],
)
def test_a_timeout_that_is_no_number_of_seconds_is_refused_at_construction(
    timeout: object,
) -> None:
    """Not deep in a socket call (-1, nan, inf), a TypeError (None, an httpx.Timeout), or
    every call failing unanswered (0), which stops a whole run."""
    with pytest.raises(
        ConfigError, match=r"^timeout must be a number of seconds in \(0, 86400\]; got "
    ):
        OSWorldServerEnv("http://127.0.0.1:9", timeout=timeout)  # type: ignore[arg-type]
    longest = OSWorldServerEnv("http://127.0.0.1:9", timeout=86400)
    assert longest._answer_seconds == 86460
    longest.close()


def test_reads_are_tried_again_and_commands_only_when_they_cannot_have_run(
    vm_server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As OSWorld's controller: three tries. A screenshot or tree is read again after any
    failure; a command is sent again after a refusal (non-200) or a connection that never
    opened, never after one that broke or timed out once sent (it may have run)."""
    # A command's answer is awaited longer than the server lets it run (120 s); 1 s here.
    monkeypatch.setattr(vm_http, "COMMAND_SECONDS", 1.0)  # the module object in use
    env = OSWorldServerEnv(vm_server.base_url, timeout=2.0, retry_wait=0)

    def count(path: str) -> int:
        return len([r for r in vm_server.requests if r.path == path])

    vm_server.enqueue(Reply(503, b"busy"), Reply(200, b"not a png"), path="/screenshot")
    vm_server.enqueue(Reply(hangup=True), path="/accessibility")
    assert env.observe()["screenshot"] == load("mousepad_notes")["screenshot"]
    assert (count("/screenshot"), count("/accessibility")) == (3, 2)
    vm_server.reset()
    vm_server.enqueue(*[Reply(500, b"down")] * 3, path="/screenshot")
    with pytest.raises(EnvironmentFailure, match="GET /screenshot: HTTP 500"):
        env.observe()
    assert count("/screenshot") == 3

    vm_server.reset()
    vm_server.enqueue(Reply(503, b"busy"), path="/execute")
    assert env.execute("pyautogui.click(1, 2)")["returncode"] == 0
    assert count("/execute") == 2
    for broken in (Reply(hangup=True), Reply(200, {"returncode": 0}, delay=3.0)):
        vm_server.reset()
        vm_server.enqueue(broken, path="/execute")
        with pytest.raises(EnvironmentFailure, match="POST /execute: ") as caught:
            env.execute("pyautogui.click(1, 2)")
        assert isinstance(caught.value, VmUnanswered)
        assert caught.value.sent
        assert count("/execute") == 1
    env.close()

    with socket.socket() as closed:  # a port nothing listens on: the request never leaves
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    nowhere = OSWorldServerEnv(f"http://127.0.0.1:{port}", timeout=2.0, retry_wait=0)
    with pytest.raises(VmUnanswered, match="POST /execute: ConnectError") as caught:
        nowhere.execute("pyautogui.click(1, 2)")
    assert not caught.value.sent
    assert pickle.loads(pickle.dumps(caught.value)).sent is False
    nowhere.close()
    for bad in ({"retries": 0}, {"retry_wait": -1}, {"retry_wait": "5"}):
        with pytest.raises(ConfigError, match="retr"):
            OSWorldServerEnv(vm_server.base_url, **bad)  # type: ignore[arg-type]
