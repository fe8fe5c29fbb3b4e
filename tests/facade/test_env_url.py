"""`osharm-agent run --tasks ... --env-url URL` drives live OSWorld VMs (here: loopback VM servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.cli import main
from adapters.trajectories.osharm import load_result_folder
from tests.adapters.loopback import LoopbackServer, Received, Reply
from tests.facade.helpers import write_task_list
from tests.facade.test_environments import VIDEO, serve_vm, vm_server  # noqa: F401  (the fixture)

CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def _args(tmp_path: Path, *extra: str) -> list[str]:
    write_task_list(tmp_path, {"os": ["_a", "_b", "_c"]})
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (CLICK, "DONE")), encoding="utf-8"
    )
    return [
        "run-tasks",
        "--tasks", str(tmp_path / "meta.json"),
        "--examples", str(tmp_path / "examples"),
        "--model", f"replay:{script}",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(tmp_path / "results"),
        *extra,
    ]  # fmt: skip


def test_a_task_list_runs_on_vm_servers(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with LoopbackServer() as other:
        vms = (vm_server, serve_vm(other))
        urls = [vm.base_url for vm in vms]
        argv = _args(tmp_path, "--env-url", urls[0], "--env-url", urls[1], "--workers", "2")
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "summary: 3 task(s): 3 finished" in out
        executed = [
            r.json()["command"][2] for vm in vms for r in vm.requests if r.path == "/execute"
        ]
        assert len(executed) == 3
        assert all(code.endswith("pyautogui.click(19, 31)") for code in executed)
        (folder,) = (tmp_path / "results").glob("pyautogui/a11y_tree/*/os/_b")
        assert [e.response for e in load_result_folder(folder)] == [CLICK, "DONE"]
        # A VM's server cannot score: the folder is marked ended but unscored, and a rerun
        # keeps it.
        assert not (folder / "result.txt").exists()
        assert (folder / "unscored.txt").read_text(encoding="utf-8").startswith("the episode ended")
        for vm in vms:
            vm.reset()
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "summary: 3 task(s): 0 finished, 3 skipped (already finished)" in out
        assert [r for vm in vms for r in vm.requests if r.path == "/execute"] == []


def test_env_url_mistakes_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "http://127.0.0.1:9"
    assert main(_args(tmp_path, "--env-url", url, "--workers", "2")) == 2
    assert "--workers 2 needs as many --env-url VMs" in capsys.readouterr().err
    assert main(_args(tmp_path, "--env-url", url, "--observations", str(tmp_path))) == 2
    assert "not both" in capsys.readouterr().err
    assert main(_args(tmp_path)) == 2
    assert "--observations DIR (or --env-url URL)" in capsys.readouterr().err
    assert main(_args(tmp_path, "--env-url", url, "--settle", "-1")) == 2
    assert "--settle takes 0 to 3600 seconds; got -1" in capsys.readouterr().err
    # One VM named twice (however spelled) would have two episodes drive one desktop at once.
    for twice in (url, "HTTP://127.0.0.1:9/", url + "/"):
        assert main(_args(tmp_path, "--env-url", url, "--env-url", twice, "--workers", "2")) == 2
        assert "names the same VM as --env-url 'http://127.0.0.1:9'" in capsys.readouterr().err
    assert main(_args(tmp_path, "--env-url", "http://a:80", "--env-url", "http://a")) == 2
    assert "names the same VM" in capsys.readouterr().err


def test_record_saves_each_episode_video_in_its_folder(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_args(tmp_path, "--env-url", vm_server.base_url, "--record")) == 0
    videos = sorted((tmp_path / "results").glob("pyautogui/a11y_tree/*/os/*/recording.mp4"))
    assert [v.parent.name for v in videos] == ["_a", "_b", "_c"]
    assert all(v.read_bytes() == VIDEO for v in videos)
    assert main(_args(tmp_path, "--record", "--observations", str(tmp_path))) == 2
    assert "--record records a live VM's screen" in capsys.readouterr().err


class RecordingVm:
    """OSWorld's recorder on a loopback VM: one recording at a time (a second start is a 400,
    "Recording is already in progress."; an end with none under way a 400 as well)."""

    def __init__(self, server: LoopbackServer, *, recording: bool = False) -> None:
        self.recording = recording
        server.route("POST", r"/start_recording", self.start)
        server.route("POST", r"/end_recording", self.end)

    def start(self, _: Received) -> Reply:
        if self.recording:
            return Reply(400, {"status": "error", "message": "Recording is already in progress."})
        self.recording = True
        return Reply(200, {"status": "success", "message": "Started recording."})

    def end(self, _: Received) -> Reply:
        if not self.recording:
            return Reply(400, {"status": "error", "message": "No recording in progress to stop."})
        self.recording = False
        return Reply(200, VIDEO, {"content-type": "video/mp4"})


def test_a_recording_left_on_by_a_killed_run_is_ended_and_every_task_recorded(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run killed mid-episode leaves the VM recording: every start was a 400, every --record
    task failed, run after run. The stale recording is ended (its video dropped) and the
    episode recorded from its start."""
    vm = RecordingVm(vm_server, recording=True)
    assert main(_args(tmp_path, "--env-url", vm_server.base_url, "--record")) == 0
    out = capsys.readouterr().out
    assert "summary: 3 task(s): 3 finished" in out
    assert "unrecorded" not in out
    paths = [r.path for r in vm_server.requests if "record" in r.path]
    assert (
        paths
        == ["/start_recording", "/end_recording"]
        + [
            "/start_recording",
            "/end_recording",
        ]
        * 3
    )
    videos = sorted((tmp_path / "results").glob("pyautogui/a11y_tree/*/os/*/recording.mp4"))
    assert [v.read_bytes() for v in videos] == [VIDEO] * 3
    assert not vm.recording


def test_a_recording_that_will_not_start_leaves_the_episode_unrecorded_not_failed(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OSWorld's controller only logs a start that fails: the episode runs, unrecorded, and a
    warning says so."""
    vm_server.route("POST", r"/start_recording", lambda _: Reply(400, {"status": "error"}))
    vm_server.route("POST", r"/end_recording", lambda _: Reply(400, {"status": "error"}))
    assert main(_args(tmp_path, "--env-url", vm_server.base_url, "--record")) == 0
    out = capsys.readouterr().out
    assert "summary: 3 task(s): 3 finished" in out
    # Each task's own line says it went unrecorded, and why (the warning names only the VM).
    unrecorded = [line for line in out.splitlines() if "finished: unrecorded: " in line]
    assert len(unrecorded) == 3
    assert all("POST /start_recording: HTTP 400" in line for line in unrecorded)
    paths = [r.path for r in vm_server.requests if "record" in r.path]
    assert paths == ["/start_recording", "/end_recording", "/start_recording"] * 3
    assert not list((tmp_path / "results").rglob("recording.mp4*"))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3
    assert all("POST /start_recording: HTTP 400" in w for w in warnings)
    assert all("this episode runs unrecorded" in w for w in warnings)
