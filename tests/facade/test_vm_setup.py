"""OSWorldServerEnv performs a task's setup steps through a loopback VM server's /setup endpoints."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings

from adapters import EnvironmentFailure, OSWorldServerEnv, TaskSetupError
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.runs import OsworldTask, run_task_list, vm_http
from adapters.runs.environments import PYAUTOGUI_PREFIX
from adapters.runs.episode import stops_run as _stops_run
from adapters.runs.vm_http import VmUnanswered
from adapters.runs.vm_setup import DOWNLOAD_WAITS, MAX_UNTIL_TRIES, plan_setup
from adapters.testing import FakeClient
from adapters.trajectories.osharm import load_result_folder
from osharm_core import AgentConfig
from tests.adapters.loopback import LoopbackServer, Received, Reply
from tests.facade.helpers import load
from tests.facade.test_environments import vm_server  # noqa: F401  (the fixture)
from tests.strategies import download_urls, setup_configs

SETUP_ROUTES = (
    "launch",
    "execute",
    "execute_with_verification",
    "open_file",
    "activate_window",
    "close_window",
    "change_wallpaper",
    "upload",
)


@pytest.fixture
def vm(vm_server: LoopbackServer) -> LoopbackServer:  # noqa: F811
    """The loopback VM server with OSWorld's /setup/... endpoints, each answering 200."""
    answer = {"status": "success", "output": "", "error": "", "returncode": 0}
    for name in SETUP_ROUTES:
        vm_server.route("POST", f"/setup/{name}", lambda _: Reply(200, answer))
    return vm_server


@pytest.fixture
def files() -> Iterator[LoopbackServer]:
    """A second loopback server: where download steps fetch their files from."""
    with LoopbackServer() as server:
        server.route("GET", r"/files/report\.docx", lambda _: Reply(200, b"PK\x03\x04 report"))
        yield server


def _env(server: LoopbackServer, **kwargs: Any) -> tuple[OSWorldServerEnv, list[float]]:
    slept: list[float] = []
    return OSWorldServerEnv(server.base_url, timeout=5.0, sleep=slept.append, **kwargs), slept


def _setup_requests(server: LoopbackServer) -> list[Received]:
    return [r for r in server.requests if r.path.startswith("/setup/")]


def _form(received: Received) -> dict[str, tuple[str | None, bytes]]:
    """A multipart body's parts by field name: (file name, content)."""
    head = f"Content-Type: {received.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + received.body)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str)
        assert isinstance(payload, bytes)
        parts[name] = (part.get_filename(), payload)
    return parts


def _step(kind: str, **parameters: Any) -> dict[str, Any]:
    return {"type": kind, "parameters": parameters}


# --- each setup type's request ---------------------------------------------------------


def test_each_setup_type_sends_what_the_server_expects(
    vm: LoopbackServer, files: LoopbackServer
) -> None:
    url = files.base_url + "/files/report.docx"
    config = [
        _step("download", files=[{"url": url, "path": "/home/user/Desktop/report.docx"}]),
        _step("launch", command=["libreoffice", "--writer"]),
        _step("launch", command="gedit  /tmp/a b.txt"),
        _step("launch", command="nautilus ~ &", shell=True),
        _step("execute", command=["sh", "-c", "echo {CLIENT_PASSWORD} {SCREEN_WIDTH}x{SCREEN_HEIGHT}"]),
        _step("command", command="xdotool mousemove {SCREEN_WIDTH_HALF} {SCREEN_HEIGHT_HALF}", shell=True, stdout="out.txt"),
        _step("execute_with_verification", command=["code"], verification={"window_exists": "Code"}, max_wait_time=5),
        _step("sleep", seconds=2.5),
        _step("open", path="/home/user/Desktop/report.docx"),
        _step("activate_window", window_name="report.docx - LibreOffice Writer", strict=True),
        _step("close_window", window_name="Gimp", by_class=True),
        _step("change_wallpaper", path="/home/user/bg.png"),
    ]  # fmt: skip
    env, slept = _env(vm, client_password="s3cret", screen_size=(1280, 720))
    obs = env.reset({"id": "t", "instruction": "Edit the report", "config": config})
    assert obs["screenshot"] == load("mousepad_notes")["screenshot"]
    sent = _setup_requests(vm)
    assert [r.path for r in sent] == [
        "/setup/upload",
        "/setup/launch",
        "/setup/launch",
        "/setup/launch",
        "/setup/execute",
        "/setup/execute",
        "/setup/execute_with_verification",
        "/setup/open_file",
        "/setup/activate_window",
        "/setup/close_window",
        "/setup/change_wallpaper",
    ]
    assert _form(sent[0]) == {
        "file_path": (None, b"/home/user/Desktop/report.docx"),
        "file_data": ("report.docx", b"PK\x03\x04 report"),
    }
    assert [r.json() for r in sent[1:]] == [
        {"command": ["libreoffice", "--writer"], "shell": False},
        {"command": ["gedit", "/tmp/a", "b.txt"], "shell": False},  # OSWorld splits on spaces
        {"command": "nautilus ~ &", "shell": True},
        {"command": ["sh", "-c", "echo s3cret 1280x720"], "shell": False},
        {"command": "xdotool mousemove 640 360", "shell": True},
        {
            "command": ["code"],
            "shell": False,
            "verification": {"window_exists": "Code"},
            "max_wait_time": 5,
            "check_interval": 1.0,
        },
        {"path": "/home/user/Desktop/report.docx"},
        {"window_name": "report.docx - LibreOffice Writer", "strict": True, "by_class": False},
        {"window_name": "Gimp", "strict": False, "by_class": True},
        {"path": "/home/user/bg.png"},
    ]
    assert slept == [2.5, 10.0]  # the sleep step, then the desktop settles
    assert [r.path for r in vm.requests[-2:]] == ["/screenshot", "/accessibility"]
    env.close()


def test_execute_with_until_repeats_until_the_answer_matches(vm: LoopbackServer) -> None:
    busy = {"status": "success", "output": "starting", "error": "", "returncode": 1}
    ready = {"status": "success", "output": "server ready", "error": "", "returncode": 1}
    vm.enqueue(Reply(200, busy), Reply(200, busy), Reply(200, ready), path="/setup/execute")
    env, slept = _env(vm)
    step = _step("execute", command=["curl", "localhost"], until={"stdout": "ready"})
    env.reset({"config": [step]})
    assert len(_setup_requests(vm)) == 3
    assert slept == [0.3, 0.3, 10.0]
    vm.reset()
    vm.route("POST", "/setup/execute", lambda _: Reply(200, busy))
    with pytest.raises(EnvironmentFailure, match=r"config\[0\] \(execute\).*never met until"):
        env.reset({"config": [_step("execute", command="false", until={"returncode": 0})]})
    assert len(_setup_requests(vm)) == MAX_UNTIL_TRIES
    env.close()


def test_a_nonzero_exit_is_no_failure_without_until(vm: LoopbackServer) -> None:
    """As in OSWorld, only a failed request fails an execute step, not the command's exit status."""
    failed = {"status": "success", "output": "", "error": "no such file", "returncode": 2}
    vm.enqueue(Reply(200, failed), path="/setup/execute")
    env, _ = _env(vm)
    env.reset({"config": [_step("execute", command=["rm", "/nope"])]})
    env.close()


def test_with_recording_set_the_recording_starts_after_the_setup(
    vm: LoopbackServer, tmp_path: Path
) -> None:
    env, _ = _env(vm, recording=tmp_path / "recording.mp4")
    vm.enqueue(Reply(500, "no window"), path="/setup/close_window")
    with pytest.raises(EnvironmentFailure, match="close_window"):
        env.reset({"config": [_step("close_window", window_name="x")]})
    env.reset({"config": [_step("launch", command="gedit")]})
    paths = [r.path for r in vm.requests]
    assert paths == [
        "/setup/close_window",
        "/setup/launch",
        "/screenshot",
        "/accessibility",
        "/start_recording",
    ]
    env.close()
    assert (tmp_path / "recording.mp4").exists()


# --- refusals: nothing is sent ---------------------------------------------------------------


def test_host_side_setup_types_are_refused_before_anything_runs(vm: LoopbackServer) -> None:
    config = [
        _step("launch", command=["google-chrome", "--remote-debugging-port=1337"]),
        _step("chrome_open_tabs", urls_to_open=["https://example.com"]),
        _step("googledrive", operation=["delete"], args=[{}]),
        _step("login", platform="googledrive", settings_file="x.json"),
    ]
    env, _ = _env(vm)
    with pytest.raises(TaskSetupError) as caught:
        env.reset({"id": "chrome-1", "config": config})
    message = str(caught.value)
    assert message.startswith("task 'chrome-1': task setup uses steps the VM server cannot")
    assert "chrome_open_tabs needs Chrome DevTools" in message
    assert "googledrive needs Google Drive credentials" in message
    assert "login needs" in message
    assert "DesktopEnvAdapter" in message
    assert vm.requests == []
    env.close()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"type": "launch"}, r"setup config: expected a list of steps"),
        ([_step("teleport", to="mars")], r"unknown step types \('teleport'\)"),
        (["launch"], r"setup config\[0\]: expected an object"),
        ([{"type": 3, "parameters": {}}], r"config\[0\]\.type: expected a string"),
        ([{"type": "sleep"}], r"config\[0\] \(sleep\)\.parameters: expected an object"),
        ([{"type": "sleep", "parameters": {}, "x": 1}], r"config\[0\] \(sleep\): unknown field 'x'"),
        ([_step("sleep", seconds=1), _step("sleep")], r"config\[1\] \(sleep\)\.parameters\.seconds: missing"),
        ([_step("sleep", seconds="2")], r"parameters\.seconds: expected a number of seconds, got str"),
        ([_step("sleep", seconds=1e9)], r"parameters\.seconds: 1000000000\.0 is outside 0\.\.600"),
        ([_step("sleep", seconds=float("nan"))], r"parameters\.seconds: nan is outside"),
        ([_step("launch", command=[])], r"\(launch\)\.parameters\.command: expected a string or a non-empty list"),
        ([_step("launch", command=["ls", 3])], r"parameters\.command\[1\]: expected a string, got int"),
        ([_step("launch", command="ls", shell="yes")], r"parameters\.shell: expected true or false"),
        ([_step("launch", command="ls", cwd="/")], r"unknown parameter 'cwd'; launch takes command, shell"),
        ([_step("open", path="")], r"\(open\)\.parameters\.path: expected a non-empty string"),
        ([_step("activate_window", window_name=None)], r"parameters\.window_name: expected a non-empty string"),
        ([_step("execute", command="ls", until={"returncode": "0"})], r"parameters\.until: returncode: expected int"),
        ([_step("execute", command="ls", until={"exit": 0})], r"parameters\.until: unknown field 'exit'"),
        ([_step("download", files=[])], r"\(download\)\.parameters\.files: expected a non-empty list"),
        ([_step("download", files=[{"url": "http://h/x"}])], r"files\[0\]: expected an object with exactly url and path"),
        ([_step("download", files=[{"url": "file:///etc/passwd", "path": "/tmp/p"}])], r"files\[0\]\.url: not an http\(s\) URL"),
        ([_step("download", files=[{"url": "http://h/x", "path": 7}])], r"files\[0\]\.path: expected a non-empty string"),
        ([_step("download", files=[{"url": "http://" + "a" * 64 + ".example/f", "path": "/tmp/p"}])], r"files\[0\]\.url: a host name that cannot be looked up \(.*label.*\): 'http://aaa"),
        ([_step("download", files=[{"url": "http://a..b/f", "path": "/tmp/p"}])], r"files\[0\]\.url: a host name that cannot be looked up"),
        ([_step("download", files=[{"url": "http://xn--/f", "path": "/tmp/p"}])], r"files\[0\]\.url: a host name that cannot be looked up \(Malformed A-label"),
        ([_step("download", files=[{"url": "https:///f", "path": "/tmp/p"}])], r"files\[0\]\.url: no host name: 'https:///f'"),
    ],
)  # fmt: skip
def test_bad_setup_steps_are_named_and_nothing_is_sent(
    vm: LoopbackServer, config: object, message: str
) -> None:
    env, slept = _env(vm)
    with pytest.raises(TaskSetupError, match=message):
        env.reset({"config": config})
    assert vm.requests == []
    assert slept == []
    env.close()


@settings(max_examples=150, deadline=None)
@given(setup_configs)
def test_any_config_is_planned_or_refused_with_an_environment_failure(config: object) -> None:
    try:
        steps = plan_setup(config)
    except EnvironmentFailure:
        return
    assert all(isinstance(step.params, dict) for step in steps)


@settings(max_examples=300, deadline=None)
@given(download_urls)
def test_a_download_url_is_refused_in_the_plan_or_its_host_can_be_looked_up(url: str) -> None:
    """Whatever the host (labels too long, empty, `xn--` ones that decode to nothing, non-ASCII),
    the plan refuses the URL as a task mistake or the request can be built and its host name
    encoded as the socket layer encodes it to look it up: never a raw UnicodeError mid-run."""
    files = [{"url": url, "path": "/tmp/f"}]
    try:
        plan_setup([_step("download", files=files)])
    except TaskSetupError as refused:
        refusal = str(refused)
    else:
        refusal = ""
    if refusal:
        assert "files[0].url: " in refusal
        return
    with httpx.Client() as client:
        request = client.build_request("GET", url)
    request.url.raw_host.decode("ascii").encode("idna")


def test_a_redirect_to_a_host_that_cannot_be_looked_up_fails_the_task_not_the_run(
    vm: LoopbackServer, files: LoopbackServer, tmp_path: Path
) -> None:
    """The task file's URL is fine; its server redirects to a host name IDNA cannot encode
    (httpx raises a UnicodeError or IDNAError, outside its own error types)."""
    targets = {"long": "http://" + "a" * 64 + ".example/f", "xn": "http://xn--/f"}
    for name, target in targets.items():
        files.route("GET", f"/files/{name}", lambda _, t=target: Reply(302, b"", {"location": t}))
    env, _ = _env(vm)
    try:
        # The codec's words differ by Python: 3.11 "UnicodeError: encoding with 'idna' codec
        # failed (UnicodeError: label empty or too long)", 3.12 "UnicodeError: label empty or
        # too long", 3.13 "UnicodeEncodeError: 'idna' codec can't encode ...: label too long".
        for name, error in (("long", r"Unicode(Encode)?Error: .*too long"), ("xn", "IDNAError")):
            url = f"{files.base_url}/files/{name}"
            files.reset()
            download = _step("download", files=[{"url": url, "path": "/x"}])
            with pytest.raises(TaskSetupError) as caught:
                env.reset({"id": "t1", "config": [download]})
            assert re.match(
                re.escape(
                    f"task 't1': setup config[0] (download): GET '{url}' "
                    "(its host, or a redirect's): "
                )
                + error,
                str(caught.value),
            )
            assert len(files.requests) == 1  # no try again: it cannot pass
    finally:
        env.close()
    assert _setup_requests(vm) == []

    def task(example_id: str, url: str) -> OsworldTask:
        config = {
            "id": example_id,
            "config": [_step("download", files=[{"url": url, "path": "/x"}])],
        }
        return OsworldTask(domain="os", example_id=example_id, instruction="Do it", config=config)

    tasks = [
        task("t0", files.base_url + "/files/report.docx"),
        task("t1", files.base_url + "/files/long"),
        task("t2", files.base_url + "/files/report.docx"),
    ]
    config = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
    result = run_task_list(
        tasks,
        config=config,
        result_dir=tmp_path,
        make_agent=lambda _: PromptAgent.from_config(config, client=FakeClient(["DONE"])),
        make_env=lambda _: OSWorldServerEnv(vm.base_url, timeout=5.0, settle=0),
        max_steps=2,
    )
    assert [o.status for o in result] == ["finished", "failed", "finished"]
    assert result[1].detail.startswith("task 't1': setup config[0] (download): GET ")


# --- failing steps ----------------------------------------------------------------------------


def test_a_failing_step_stops_the_setup_and_names_step_and_endpoint(vm: LoopbackServer) -> None:
    vm.enqueue(Reply(500, "Failed to launch: no such app"), path="/setup/launch")
    config = [
        _step("sleep", seconds=1),
        _step("launch", command=["gimp"]),
        _step("open", path="/tmp/x.png"),
    ]
    env, _ = _env(vm, retry_wait=0)
    with pytest.raises(TaskSetupError) as caught:
        env.reset({"config": config})
    assert str(caught.value) == (
        "setup config[1] (launch): POST /setup/launch: HTTP 500: 'Failed to launch: no such app'"
    )
    assert [r.path for r in vm.requests] == ["/setup/launch"]  # no open, no observation
    vm.reset()
    vm.enqueue(Reply(hangup=True), path="/setup/open_file")
    # A step left unanswered on a VM that still answers fails the task (not the run) ...
    with pytest.raises(TaskSetupError, match=r"config\[0\] \(open\): POST /setup/open_file: "):
        env.reset({"config": [_step("open", path="/tmp/x.png")]})
    assert [r.path for r in vm.requests] == ["/setup/open_file", "/screenshot"]
    vm.reset()
    vm.enqueue(Reply(hangup=True), path="/setup/open_file")
    vm.enqueue(*[Reply(hangup=True)] * 3, path="/screenshot")
    # ... while a VM that answers nothing after it is gone: no fault of the task (it stops a run).
    with pytest.raises(
        VmUnanswered, match=r"config\[0\] \(open\): POST /setup/open_file: "
    ) as hung:
        env.reset({"config": [_step("open", path="/tmp/x.png")]})
    assert not isinstance(hung.value, TaskSetupError)
    env.close()


def test_download_failures_upload_nothing(vm: LoopbackServer, files: LoopbackServer) -> None:
    big = files.base_url + "/files/big.bin"
    files.route("GET", r"/files/big\.bin", lambda _: Reply(200, b"x" * 5000))
    env, _ = _env(vm, max_download_bytes=1000)
    step = _step("download", files=[{"url": big, "path": "/tmp/big.bin"}])
    with pytest.raises(EnvironmentFailure, match=r"\(download\): GET .*passes max_download_bytes"):
        env.reset({"config": [step]})
    missing = files.base_url + "/files/missing.pdf"
    step = _step("download", files=[{"url": missing, "path": "/tmp/m.pdf"}])
    with pytest.raises(
        EnvironmentFailure, match=r"config\[0\] \(download\): GET '.*/missing\.pdf': HTTP 404"
    ):
        env.reset({"config": [step]})
    assert vm.requests == []
    assert len([r for r in files.requests if r.path == "/files/missing.pdf"]) == 1  # 4xx: no retry
    env.close()


def test_a_download_is_retried_on_server_errors(vm: LoopbackServer, files: LoopbackServer) -> None:
    url = files.base_url + "/files/report.docx"
    files.enqueue(Reply(503, b"busy"), Reply(hangup=True))
    env, slept = _env(vm)
    env.reset({"config": [_step("download", files=[{"url": url, "path": "~/r.docx"}])]})
    (upload,) = _setup_requests(vm)
    assert _form(upload)["file_data"] == ("r.docx", b"PK\x03\x04 report")
    assert len(files.requests) == 3
    assert slept[:2] == list(DOWNLOAD_WAITS)  # a moment before each try again (then reset's pause)
    files.reset()
    slept.clear()
    files.enqueue(*[Reply(502, b"down")] * 3)
    with pytest.raises(EnvironmentFailure, match="HTTP 502"):
        env.reset({"config": [_step("download", files=[{"url": url, "path": "/tmp/r"}])]})
    assert slept[:2] == list(DOWNLOAD_WAITS)
    env.close()


def test_an_upload_the_server_refuses_is_a_failure(
    vm: LoopbackServer, files: LoopbackServer
) -> None:
    vm.enqueue(Reply(400, {"error": "file_path and file_data are required"}), path="/setup/upload")
    url = files.base_url + "/files/report.docx"
    env, _ = _env(vm)
    with pytest.raises(EnvironmentFailure, match=r"POST /setup/upload: HTTP 400: .*file_path and"):
        env.reset({"config": [_step("download", files=[{"url": url, "path": "/tmp/r"}])]})
    env.close()


# --- a task list with setup steps on a live VM ---------------------------------------------


def test_a_task_with_setup_steps_runs_through_env_url(
    vm: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = tmp_path / "examples" / "os"
    examples.mkdir(parents=True)
    steps = [
        _step("execute", command=["bash", "-c", "echo {CLIENT_PASSWORD} | sudo -S true"]),
        _step("launch", command=["gedit"]),
        _step("activate_window", window_name="gedit"),
    ]
    task = {"id": "_a", "instruction": "Write a note", "config": steps}
    (examples / "_a.json").write_text(json.dumps(task), encoding="utf-8")
    (tmp_path / "meta.json").write_text(json.dumps({"os": ["_a"]}), encoding="utf-8")
    script = tmp_path / "replies.jsonl"
    replies = ['```json\n{"action_type": "TYPING", "text": "hi \'there\'"}\n```', "DONE"]
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in replies), encoding="utf-8"
    )
    argv = [
        "run-tasks",
        "--tasks", str(tmp_path / "meta.json"),
        "--examples", str(tmp_path / "examples"),
        "--model", f"replay:{script}",
        "--observation-type", "a11y_tree",
        "--action-space", "computer_13",
        "--out", str(tmp_path / "results"),
        "--env-url", vm.base_url,
        "--settle", "0",
        "--client-password", "s3cret",
    ]  # fmt: skip
    assert main(argv) == 0
    assert "summary: 1 task(s): 1 finished" in capsys.readouterr().out
    paths = [r.path for r in vm.requests if r.method == "POST"]
    assert paths == ["/setup/execute", "/setup/launch", "/setup/activate_window", "/execute"]
    assert vm.requests[0].json()["command"][2] == "echo s3cret | sudo -S true"
    (execute,) = [r.json() for r in vm.requests if r.path == "/execute"]
    assert execute["command"][2] == PYAUTOGUI_PREFIX + "pyautogui.typewrite(\"hi 'there'\")"
    (folder,) = (tmp_path / "results").glob("computer_13/a11y_tree/*/os/_a")
    assert [e.response for e in load_result_folder(folder)] == replies


def test_a_task_whose_setup_is_refused_or_fails_fails_alone_and_the_run_goes_on(
    vm: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = tmp_path / "examples" / "chrome"
    examples.mkdir(parents=True)
    tasks = {
        "_tabs": [_step("chrome_open_tabs", urls_to_open=["https://example.com"])],
        "_broken": [_step("launch", command=["no-such-app"])],
        "_fine": [_step("launch", command=["gedit"])],
    }
    for task_id, steps in tasks.items():
        config = {"id": task_id, "instruction": "Do it", "config": steps}
        (examples / f"{task_id}.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "meta.json").write_text(json.dumps({"chrome": list(tasks)}), encoding="utf-8")
    vm.route(
        "POST",
        "/setup/launch",
        lambda r: (
            Reply(500, "no such app") if "no-such-app" in r.json()["command"] else Reply(200, {})
        ),
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = [
        "run-tasks",
        "--tasks", str(tmp_path / "meta.json"),
        "--examples", str(tmp_path / "examples"),
        "--model", f"replay:{script}",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(tmp_path / "results"),
        "--env-url", vm.base_url,
        "--settle", "0",
    ]  # fmt: skip
    assert main(argv) == 1  # a task failed
    out = capsys.readouterr().out
    assert "[chrome/_tabs] failed" in out
    assert "chrome_open_tabs needs Chrome DevTools" in out
    assert "[chrome/_broken] failed" in out
    assert "POST /setup/launch: HTTP 500: 'no such app'" in out
    assert "[chrome/_fine] finished" in out
    assert "summary: 3 task(s): 1 finished, 0 skipped (already finished), 2 failed" in out
    root = tmp_path / "results" / "pyautogui" / "a11y_tree"
    for task_id in ("_tabs", "_broken"):
        (folder,) = root.glob(f"*/chrome/{task_id}")
        assert not (folder / "result.txt").exists()  # unfinished: a rerun tries it again
        (line,) = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
        assert json.loads(line) == {"Error": f"Time limit exceeded in chrome/{task_id}"}


def test_screen_placeholders_use_the_vm_screen_read_only_when_needed(vm: LoopbackServer) -> None:
    env, _ = _env(vm, settle=0)
    env.reset({"config": [_step("execute", command="echo {CLIENT_PASSWORD}")]})
    assert [r.path for r in vm.requests][:2] == ["/setup/execute", "/screenshot"]  # the observation
    vm.reset()
    env2, _ = _env(vm, settle=0)
    env2.reset({"config": [_step("execute", command="xdotool mousemove {SCREEN_WIDTH_HALF} 5")]})
    paths = [r.path for r in vm.requests]
    assert paths[:2] == ["/screenshot", "/setup/execute"]  # the size first, from a screenshot
    assert vm.requests[1].json()["command"] == "xdotool mousemove 960 5"
    env.close()
    env2.close()


def test_a_redirect_to_a_file_url_fails_at_once(vm: LoopbackServer, files: LoopbackServer) -> None:
    """A redirect off http(s) (`file:///etc/passwd`) is never followed and never tried again."""
    files.route(
        "GET", "/files/local", lambda _: Reply(302, b"", {"location": "file:///etc/passwd"})
    )
    env, slept = _env(vm)
    try:
        download = _step("download", files=[{"url": f"{files.base_url}/files/local", "path": "/x"}])
        with pytest.raises(TaskSetupError, match="UnsupportedProtocol"):
            env.reset({"id": "t1", "config": [download]})
        assert len(files.requests) == 1
        assert slept == []
    finally:
        env.close()
    assert _setup_requests(vm) == []


# --- commands that take long, steps left unanswered ---------------------------------------


def test_setup_commands_are_awaited_longer_than_the_server_lets_them_run() -> None:
    """OSWorld's server lets a command run 120 s, then answers 500; execute_with_verification
    runs it, then verifies for up to max_wait_time. The answer is awaited longer than that,
    so an overrun is the server's 500 (the task fails), never a read timeout (no answer)."""
    notes = load("mousepad_notes")
    reads: dict[str, float | None] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        reads[request.url.path] = request.extensions["timeout"]["read"]
        body = {"status": "success", "returncode": 0}
        if request.url.path == "/screenshot":
            return httpx.Response(200, stream=httpx.ByteStream(notes["screenshot"]))
        if request.url.path == "/accessibility":
            body = {"AT": notes["accessibility_tree"]}
        return httpx.Response(200, stream=httpx.ByteStream(json.dumps(body).encode()))

    client = httpx.Client(transport=httpx.MockTransport(answer), timeout=120.0)
    env = OSWorldServerEnv("http://vm:5000", http_client=client, settle=0)
    verify = {"command": "true", "verification": {"command_success": "true"}, "max_wait_time": 60}
    env.reset({"config": [_step("execute", command="true"), _step("launch", command="x")]})
    env.reset({"config": [_step("execute_with_verification", **verify)]})
    assert reads == {
        "/setup/execute": 150.0,  # 120 s and a margin, as for a step's /execute
        "/setup/launch": 120.0,  # the client's own
        "/setup/execute_with_verification": 210.0,  # 120 s, then 60 s, and a margin
        "/screenshot": 120.0,
        "/accessibility": 120.0,
    }
    env.close()
    client.close()


def test_a_setup_command_that_overruns_fails_its_task_with_the_server_s_answer(
    vm: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's read timeout (1 s here) is shorter than the server's command limit (2 s
    here; 120 s in OSWorld): the server's 500 still arrives, and fails only the task."""
    monkeypatch.setattr(vm_http, "COMMAND_SECONDS", 2.0)  # the module object in use
    overrun = {"status": "error", "message": "Command timed out after 120 seconds."}
    vm.route("POST", "/setup/execute", lambda _: Reply(500, overrun, delay=1.5))
    env = OSWorldServerEnv(vm.base_url, timeout=1.0, settle=0)
    with pytest.raises(TaskSetupError) as caught:
        env.reset({"id": "t", "config": [_step("execute", command="./setup.sh", shell=True)]})
    assert str(caught.value).startswith(
        "task 't': setup config[0] (execute): POST /setup/execute: HTTP 500: "
    )
    assert not _stops_run(caught.value)
    env.close()


def test_a_step_left_unanswered_fails_its_task_while_the_vm_still_answers(
    vm: LoopbackServer,
) -> None:
    """A read timeout in a setup step is the step's failure when the VM then shows a
    screenshot; a VM that shows none is gone, which stops the run."""
    vm.route("POST", "/setup/launch", lambda _: Reply(200, {}, delay=1.5))
    env = OSWorldServerEnv(vm.base_url, timeout=1.0, settle=0, retry_wait=0)
    task = {"id": "t", "config": [_step("sleep", seconds=0), _step("launch", command="gimp")]}
    with pytest.raises(TaskSetupError) as caught:
        env.reset(task)
    assert re.match(
        r"task 't': setup config\[1\] \(launch\): POST /setup/launch: ReadTimeout: .*"
        r"\(the VM still answers: the step failed, not the VM\)$",
        str(caught.value),
    )
    assert not _stops_run(caught.value)
    assert [r.path for r in vm.requests] == ["/setup/launch", "/screenshot"]
    vm.reset()
    vm.enqueue(*[Reply(hangup=True)] * 3, path="/screenshot")
    with pytest.raises(VmUnanswered, match=r"config\[1\] \(launch\): POST /setup/launch: ") as gone:
        env.reset(task)
    assert _stops_run(gone.value)
    assert [r.path for r in vm.requests] == ["/setup/launch"] + ["/screenshot"] * 3
    env.close()
