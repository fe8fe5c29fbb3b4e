"""A run's tasks share their model's client, closed at the end; a dropped client is freed at once."""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import _inputs, main
from adapters.contract import ModelClient
from adapters.engine.client import HttpModelClient
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.conftest import child_environment
from tests.facade.helpers import observation_folder, write_task_list

CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[ModelClient]:
    """Every client the CLI builds, in order."""
    made: list[ModelClient] = []
    real = _inputs.model_client

    def spy(*args: Any, **kwargs: Any) -> ModelClient:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_inputs, "model_client", spy)
    monkeypatch.setenv("LOOPBACK_KEY", "k")
    return made


def _closed(client: ModelClient) -> bool:
    assert isinstance(client, HttpModelClient)
    return client._own_client is None and not client._own_async


def _model_options(server: LoopbackServer) -> list[str]:
    return [
        "--model", "compat/m", "--base-url", server.base_url + "/v1",
        "--api-key-env", "LOOPBACK_KEY", "--observation-type", "a11y_tree",
    ]  # fmt: skip


def test_a_task_list_run_builds_one_client_and_closes_it(
    tmp_path: Path, built: list[ModelClient], capsys: pytest.CaptureFixture[str]
) -> None:
    meta, examples = write_task_list(tmp_path, {"os": [f"t{i}" for i in range(6)]})
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: Reply(200, chat_completion("DONE")))
        argv = [
            "run-tasks", "--tasks", str(meta), "--examples", str(examples),
            "--observations", str(observation_folder(tmp_path / "obs")),
            "--out", str(tmp_path / "results"), "--workers", "3", *_model_options(server),
        ]  # fmt: skip
        assert main(argv) == 0
    assert "6 finished" in capsys.readouterr().out
    assert len(built) == 1  # was one per task, each holding a socket until a GC pass
    assert _closed(built[0])


def test_task_directories_of_one_model_share_its_client(
    tmp_path: Path, built: list[ModelClient], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = []
    for name in ("a", "b", "c"):
        task = observation_folder(tmp_path / name, ("mousepad_notes",))
        (task / "task.json").write_text(json.dumps({"instruction": f"Do {name}"}), encoding="utf-8")
        tasks.append(str(task))
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: Reply(200, chat_completion(CLICK)))
        argv = ["run", *tasks, "--out", str(tmp_path / "out"), "--max-steps", "1"]
        assert main([*argv, *_model_options(server)]) == 0
    assert capsys.readouterr().out.count("summary [") == 3
    assert len(built) == 1
    assert _closed(built[0])


@pytest.mark.parametrize("status", [200, 401])
def test_predict_closes_its_client_whether_the_call_succeeds_or_fails(
    tmp_path: Path, built: list[ModelClient], status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """`predict` left its client's connection to the garbage collector: a ResourceWarning
    (unclosed socket) at exit under `python -X dev` or `PYTHONWARNINGS=error`."""
    task = observation_folder(tmp_path / "task", ("mousepad_notes",))
    body = chat_completion(CLICK) if status == 200 else {"error": {"message": "bad key"}}
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: Reply(status, body))
        argv = ["predict", str(task), "--instruction", "x", *_model_options(server)]
        assert main(argv) == (0 if status == 200 else 1)
    capsys.readouterr()
    assert len(built) == 1
    assert _closed(built[0])


@pytest.mark.parametrize("spelling", ["replay:", "REPLAY:", "replay/"])
def test_each_task_gets_its_own_replay_client_however_the_scheme_is_spelled(
    tmp_path: Path, spelling: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay client keeps its place in its recording: shared, the second task would
    start at the first task's second reply."""
    script = tmp_path / "script.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in ("WAIT", "DONE")), encoding="utf-8"
    )
    tasks = [str(observation_folder(tmp_path / name, ("mousepad_notes",))) for name in "ab"]
    argv = ["run", *tasks, "--model", f"{spelling}{script}", "--out", str(tmp_path / "out")]
    assert main([*argv, "--instruction", "x", "--max-steps", "1"]) == 0
    for name in "ab":
        line = (
            (tmp_path / "out" / name / "trajectory.jsonl")
            .read_text(encoding="utf-8")
            .splitlines()[0]
        )
        assert json.loads(line)["actions"] == ["WAIT"]
    assert capsys.readouterr().out.count("summary [") == 2


def test_kept_clients_travel_empty() -> None:
    """A copy sent to a Ray worker builds its own clients there."""
    args = argparse.Namespace(model="replay:x", base_url=None, api_key_env=None)
    clients = _inputs.ModelClients(args)
    clients._kept[("m", 0)] = object()  # type: ignore[assignment]
    copy = pickle.loads(pickle.dumps(clients))
    assert copy._kept == {}
    assert copy._args == args


_DROP = """
import asyncio, gc, sys, weakref
from adapters.contract import ModelRequest
from adapters.registry import client_for
from osharm_core import AgentConfig
from osharm_core.messages import Message, TextPart

request = ModelRequest.from_config(
    AgentConfig(model="m", observation_type="a11y_tree"), (Message("user", (TextPart("hi"),)),), None
)

async def use_and_drop():
    client = client_for("compat/m", base_url=sys.argv[1], api_key="k")
    await client.acomplete(request)
    dropped = weakref.ref(client)
    del client
    await asyncio.sleep(0.05)  # the watcher closes the connections on the loop
    return dropped() is None

gc.disable()
print("freed" if asyncio.run(use_and_drop()) else "kept")
"""


def test_a_dropped_client_is_freed_without_the_garbage_collector() -> None:
    """Its loop's watcher refers to it weakly, so dropping it frees it (and its sockets) at
    once, not at the next collection, which long runs make rarely. In a process of its own:
    the tests' own bookkeeping keeps every client they build."""
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: Reply(200, chat_completion("ok")))
        child = subprocess.run(
            [sys.executable, "-W", "error::ResourceWarning", "-c", _DROP, server.base_url + "/v1"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[2],
            env=child_environment(),
            check=False,
        )
    assert (child.stdout.strip(), child.stderr) == ("freed", "")
