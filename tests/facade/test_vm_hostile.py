"""A VM server (or a download host) that misbehaves: answers that drip, nest, stack encodings
or claim a failure after running the command; a task file with absurd numbers; bad VM URLs."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import httpx
import pytest

from adapters import DesktopEnvAdapter, EnvironmentFailure, OSWorldServerEnv, TaskSetupError
from adapters.cli import main
from adapters.runs.episode import stops_run as _stops_run
from adapters.runs.vm_http import VmUnanswered, vm_answer
from adapters.runs.vm_setup import plan_setup
from adapters.trajectories.osharm import load_result_folder
from tests.adapters.loopback import LoopbackServer, Reply
from tests.adapters.raw import RawServer, answer
from tests.facade.helpers import load
from tests.facade.test_env_url import _args
from tests.facade.test_environments import FakeDesktopEnv, serve_vm, vm_server  # noqa: F401


def _count(server: LoopbackServer, path: str) -> int:
    return len([r for r in server.requests if r.path == path])


def test_a_500_from_execute_is_not_sent_again(vm_server: LoopbackServer) -> None:  # noqa: F811
    """OSWorld's server answers 500 also when the command ran and its output could not be
    decoded, or it overran: sending it again would type, click or send twice more."""
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, retry_wait=0)
    vm_server.enqueue(Reply(500, {"status": "error", "message": "timed out"}), path="/execute")
    with pytest.raises(EnvironmentFailure, match="POST /execute: HTTP 500"):
        env.execute("pyautogui.typewrite('hello')")
    assert _count(vm_server, "/execute") == 1
    vm_server.enqueue(Reply(429, b"slow down"), Reply(503, b"busy"), path="/execute")
    assert env.execute("pyautogui.click(1, 2)")["returncode"] == 0  # busy: it did not run
    assert _count(vm_server, "/execute") == 4
    env.close()


def test_answers_nested_too_deeply_are_environment_failures(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, retries=1)
    vm_server.enqueue(Reply(200, nested), path="/execute")
    with pytest.raises(EnvironmentFailure, match="POST /execute did not return JSON"):
        env.execute("pyautogui.click(1, 2)")
    # Readable, but writing it to traj.jsonl from deeper in the stack might not be: refused.
    vm_server.enqueue(Reply(200, b"[" * 200 + b"]" * 200), path="/execute")
    with pytest.raises(EnvironmentFailure, match=r"^POST /execute: .*nested more than 32 levels"):
        env.execute("pyautogui.click(1, 2)")
    vm_server.enqueue(Reply(200, nested), path="/accessibility")
    with pytest.raises(EnvironmentFailure, match="GET /accessibility did not return"):
        env.observe()
    vm_server.route("POST", "/setup/execute", lambda _: Reply(200, nested))
    step = {"command": ["true"], "until": {"returncode": 0}}
    with pytest.raises(TaskSetupError, match=r"config\[0\] \(execute\)"):
        env.reset({"config": [{"type": "execute", "parameters": step}]})
    env.close()


def test_an_answer_that_drips_stops_at_its_deadline(vm_server: LoopbackServer) -> None:  # noqa: F811
    vm_server.enqueue(Reply(200, b"x" * 40, trickle=0.1), path="/screenshot")
    started = time.monotonic()
    with httpx.Client(timeout=5.0) as http, pytest.raises(EnvironmentFailure, match="deadline"):
        vm_answer(
            http,
            "GET",
            vm_server.base_url + "/screenshot",
            where="GET /screenshot",
            limit=1000,
            seconds=0.5,
        )
    assert time.monotonic() - started < 3.5  # (the whole drip takes 4 s)


def test_a_recording_compressed_twice_is_refused_before_it_inflates(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    bomb = gzip.compress(gzip.compress(bytes(50 * 1024 * 1024)))
    vm_server.route(
        "POST",
        "/end_recording",
        lambda _: Reply(200, bomb, {"content-encoding": "gzip, gzip"}),
    )
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, max_recording_bytes=1000)
    with pytest.raises(EnvironmentFailure, match="content-encoding 'gzip, gzip'"):
        env.end_recording(tmp_path / "video.mp4")
    assert list(tmp_path.iterdir()) == []
    once = gzip.compress(bytes(50 * 1024 * 1024))
    vm_server.route(
        "POST", "/end_recording", lambda _: Reply(200, once, {"content-encoding": "gzip"})
    )
    with pytest.raises(EnvironmentFailure, match=r"the video passes max_recording_bytes \(1000\)"):
        env.end_recording(tmp_path / "video.mp4")
    env.close()


def test_absurd_numbers_in_a_setup_step_are_refused_not_a_crash() -> None:
    for step in (
        {"type": "sleep", "parameters": {"seconds": 10**400}},
        {
            "type": "execute_with_verification",
            "parameters": {"command": ["true"], "max_wait_time": 10**400},
        },
    ):
        with pytest.raises(TaskSetupError, match="outside"):
            plan_setup([step])


def test_a_wrapped_desktop_env_whose_info_is_not_a_mapping_is_a_typed_error() -> None:
    for info in ("ok", 5, ["a"]):
        env = DesktopEnvAdapter(FakeDesktopEnv(step=(FakeDesktopEnv().reset(), 0, False, info)))
        with pytest.raises(EnvironmentFailure, match="step: info is"):
            env.step("WAIT")


def test_vm_urls_are_checked_and_one_worker_per_vm_by_default(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for url, message in (
        ("localhost:5000", "must be http://HOST:PORT"),
        ("http://[::1", "is not a URL"),
        ("ftp://vm:21", "must be http://HOST:PORT"),
    ):
        assert main(_args(tmp_path, "--env-url", url)) == 2
        assert message in capsys.readouterr().err
    with LoopbackServer() as other:
        argv = _args(
            tmp_path, "--env-url", vm_server.base_url, "--env-url", serve_vm(other).base_url
        )
        assert main(argv) == 0
        assert "summary: 3 task(s): 3 finished" in capsys.readouterr().out
        assert [r for r in other.requests if r.path == "/execute"]  # each VM given ran episodes


# --- an answer that came, malformed, is not "no answer" ----------------------------------------

_HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
#: Answers that arrived but cannot be used: each fails its call, not the run.
MALFORMED = {
    "a bad status line": b"HTTP/1.1 2OO OK\r\n\r\n",
    "a bad Content-Length": _HEAD_200 + b"Content-Length: abc\r\n\r\n{}",
    "a body shorter than declared": _HEAD_200 + b'Content-Length: 99\r\n\r\n{"AT": ""}',
    "a connection reset after the head": _HEAD_200 + b'Content-Length: 99\r\n\r\n{"AT": ',
}
#: No answer at all: the server closed the connection before a whole status line.
UNANSWERED = {"nothing": b"", "half a status line": b"HTTP/1.1 20"}


@pytest.mark.parametrize("case", list(MALFORMED) + list(UNANSWERED))
def test_a_malformed_answer_fails_its_call_and_only_no_answer_stops_the_run(case: str) -> None:
    """A VM that answered, badly (a bad status line or header, a body cut short or reset),
    gives a plain EnvironmentFailure naming the endpoint: its episode fails, the run goes
    on. Only no answer at all is a VmUnanswered, which stops the run."""
    screenshot = answer(200, load("mousepad_notes")["screenshot"], "image/png")
    sent = {**MALFORMED, **UNANSWERED}[case]
    reset = ["/accessibility"] if "reset" in case else []
    with RawServer({"/screenshot": screenshot, "/accessibility": sent}, reset=reset) as vm:
        env = OSWorldServerEnv(vm.base_url, timeout=5.0, retries=1, screen_size=(64, 48))
        with pytest.raises(EnvironmentFailure, match=r"^GET /accessibility: ") as caught:
            env.observe()
        env.close()
    if case in MALFORMED:
        assert not isinstance(caught.value, VmUnanswered), caught.value
        assert not _stops_run(caught.value)
        kind = "ReadError: " if "reset" in case else "a malformed answer (RemoteProtocolError: "
        assert kind in str(caught.value)
    else:
        assert isinstance(caught.value, VmUnanswered), caught.value
        assert _stops_run(caught.value)


@pytest.mark.parametrize("trickle", [0.3, 0.0005])
def test_an_answer_still_arriving_at_its_deadline_is_no_answer(
    vm_server: LoopbackServer,  # noqa: F811
    trickle: float,
) -> None:
    """A hung server: a body that stalls between bytes (each read times out) and one that
    keeps coming (the body reader sees the deadline pass) are both unanswered, so the run stops."""
    vm_server.enqueue(Reply(200, b"x" * 10_000, trickle=trickle), path="/screenshot")
    with httpx.Client(timeout=5.0) as http, pytest.raises(VmUnanswered, match="deadline"):
        vm_answer(
            http,
            "GET",
            vm_server.base_url + "/screenshot",
            where="GET /screenshot",
            limit=100_000,
            seconds=0.5,
        )


def test_a_command_that_prints_megabytes_leaves_a_small_step_info(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    """Each step's info went whole into traj.jsonl (up to 64 MiB a step): a few steps of a
    command printing 40 MB made a folder past the readers' 256 MiB cap. Each field keeps its
    first 64 Ki characters and its length; at most 8 fields."""
    big = {
        "status": "success",
        "output": "A" * 1_000_000,
        "error": "é" * 70_000,
        "returncode": 0,
        "nested": [["x" * 1000] * 100],
        "x" * 200: "a long name",
        **{f"extra{i:02}": i for i in range(30)},
    }
    vm_server.enqueue(Reply(200, big), path="/execute")
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0)
    info = env.step("print('A' * 1_000_000)")[3]["execute"]
    assert info["output"] == "A" * 65536
    assert info["output_chars"] == 1_000_000
    assert info["error"] == "é" * 65536
    assert info["error_chars"] == 70_000
    assert (info["status"], info["returncode"]) == ("success", 0)
    assert info["nested"].startswith('[["xxx')
    assert len(info["nested"]) == 65536
    assert info["nested_chars"] == len(json.dumps(big["nested"]))
    assert sorted(info)[:3] == ["error", "error_chars", "extra00"]
    assert info["extra02"] == 2
    assert "extra03" not in info
    assert info["fields_left_out"] == len(big) - 8
    assert len(json.dumps(info, ensure_ascii=False)) < 4 * 65536
    # Small answers stay as they are; execute() itself still gives the whole answer.
    small = {"status": "success", "output": "hi\n", "error": "", "returncode": 0}
    vm_server.enqueue(Reply(200, small), path="/execute")
    assert env.step("print('hi')")[3] == {"execute": small}
    vm_server.enqueue(Reply(200, big), path="/execute")
    assert env.execute("print('A' * 1_000_000)") == big
    env.close()


def test_a_result_folder_stays_readable_however_much_each_command_prints(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    answer = {"status": "success", "output": "A" * 4_000_000, "error": "", "returncode": 0}
    vm_server.route("POST", "/execute", lambda _: Reply(200, answer))
    args = _args(tmp_path, "--env-url", vm_server.base_url, "--settle", "0")
    assert main(args) == 0
    (folder,) = (tmp_path / "results").glob("pyautogui/a11y_tree/*/os/_a")
    (line, _) = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(line) < 100_000
    assert json.loads(line)["info"]["execute"]["output_chars"] == 4_000_000
    assert len(load_result_folder(folder)) == 2
