"""The run manifest: written at the result root by every run (both formats, `run` and
`run-tasks`, the library's runner and Ray), free of secrets, and refusing to mix runs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.cli._manifest import command_manifest
from adapters.runs import arun_task_list, in_thread
from adapters.runs.manifest import (
    MANIFEST_FILE,
    MixedRunError,
    RunManifest,
    git_commit,
    read_manifest,
    redacted_command,
)
from adapters.runs.tasks import OsworldTask
from adapters.testing import FakeClient
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig
from tests.facade.helpers import observation_folder, write_task_list

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task"
RECORDED = f"replay:{EXAMPLE / 'trajectory.jsonl'}"
#: The keys every manifest holds.
KEYS = {
    "manifest_version", "layout", "library_version", "git_commit", "python", "dependencies",
    "model", "provider", "base_url_host", "config", "config_sha256", "prompts",
    "prices_version", "command", "started", "ended", "workers", "ray_address", "tasks",
    "task_list_sha256", "allow_mixed", "outcomes", "previous",
}  # fmt: skip


def _run(out: Path, *extra: str, form: str = "osharm") -> int:
    argv = ["run", str(EXAMPLE), "--format", form, "--model", RECORDED, "--out", str(out)]
    return main([*argv, *extra])


def test_run_writes_its_manifest_without_secrets(tmp_path: Path) -> None:
    """`run` writes manifest.json at --out: every key, the config without the password, the
    command line with the password's value taken out, start, end and each task's outcome."""
    assert _run(tmp_path / "out", "--client-password", "s3cret-pass-word") == 0
    text = (tmp_path / "out" / MANIFEST_FILE).read_text("utf-8")
    assert "s3cret-pass-word" not in text
    manifest = json.loads(text)
    assert set(manifest) == KEYS
    assert manifest["config"]["custom_client_password"] is True
    assert "client_password" not in manifest["config"]
    assert manifest["command"][-2:] == ["--client-password", "[redacted]"]
    assert manifest["command"][:2] == ["osharm-agent", "run"]
    assert (manifest["provider"], manifest["layout"], manifest["workers"]) == (
        "replay",
        "osharm",
        1,
    )
    assert manifest["started"] <= manifest["ended"]
    assert list(manifest["prompts"]) == ["a11y_tree/pyautogui"]
    assert len(manifest["config_sha256"]) == len(manifest["task_list_sha256"]) == 64
    (outcome,) = manifest["outcomes"]
    assert (outcome["status"], outcome["steps"], outcome["example_id"]) == ("finished", 2, "task")
    assert outcome["folder"].endswith("/local/task")
    assert manifest["dependencies"]["jinja2"]


def test_jsonl_runs_write_it_too(tmp_path: Path) -> None:
    """`run --format jsonl` keeps its manifest at --out, beside the trajectories."""
    assert _run(tmp_path / "out", form="jsonl") == 0
    manifest = read_manifest(tmp_path / "out")
    assert manifest is not None
    assert (manifest["layout"], manifest["outcomes"][0]["folder"]) == ("jsonl", ".")


def test_resuming_with_another_configuration_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run into the same tree with another temperature is refused in one line naming
    it, before anything runs; --allow-mixed goes on and says so in the manifest."""
    out = tmp_path / "out"
    assert _run(out) == 0
    first = read_manifest(out)
    capsys.readouterr()
    assert _run(out, "--temperature", "0.5", "--overwrite") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "records a run with another configuration (temperature 1.0 then 0.5)" in err
    assert "--allow-mixed" in err
    assert read_manifest(out) == first
    assert _run(out, "--temperature", "0.5", "--allow-mixed") == 0
    mixed = read_manifest(out)
    assert mixed is not None
    assert mixed["allow_mixed"] is True
    assert mixed["config"]["temperature"] == 0.5
    assert mixed["previous"] == [{k: v for k, v in (first or {}).items() if k != "previous"}]


def test_the_same_configuration_resumes_and_keeps_the_earlier_run(tmp_path: Path) -> None:
    """The same command again resumes; the earlier run's manifest is kept in `previous`."""
    out = tmp_path / "out"
    assert _run(out) == 0
    assert _run(out) == 0
    manifest = read_manifest(out)
    assert manifest is not None
    assert [run["outcomes"][0]["status"] for run in manifest["previous"]] == ["finished"]
    assert manifest["outcomes"][0]["status"] == "skipped"


def test_other_prompts_or_an_unreadable_manifest_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tree whose prompts hash differently (another library version's prompt), or whose
    manifest cannot be read, is not resumed without --allow-mixed."""
    out = tmp_path / "out"
    assert _run(out) == 0
    manifest = read_manifest(out) or {}
    manifest["prompts"] = {"a11y_tree/pyautogui": "0" * 64}
    (out / MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    assert _run(out) == 2
    assert "system prompt a11y_tree/pyautogui differs" in capsys.readouterr().err
    (out / MANIFEST_FILE).write_text("{", encoding="utf-8")
    assert _run(out) == 2
    assert "its manifest cannot be read" in capsys.readouterr().err
    assert _run(out, "--allow-mixed") == 0


def test_run_tasks_records_its_workers_and_task_list(tmp_path: Path) -> None:
    """`run-tasks` writes the manifest with its workers, its tasks and their hash."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    script = tmp_path / "replies.jsonl"
    script.write_text('{"response": "DONE"}\n' * 2, encoding="utf-8")
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(observation_folder(tmp_path / "obs")),
        "--model", f"replay:{script}", "--observation-type", "a11y_tree",
        "--out", str(tmp_path / "results"), "--workers", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    manifest = read_manifest(tmp_path / "results")
    assert manifest is not None
    assert (manifest["workers"], manifest["tasks"], manifest["ray_address"]) == (2, 2, None)
    assert [o["example_id"] for o in manifest["outcomes"]] == ["_a", "_b"]


def test_the_library_runner_keeps_a_manifest(tmp_path: Path) -> None:
    """`arun_task_list(manifest=...)` checks and writes it, adding what only the runner knows."""
    import asyncio

    config = AgentConfig(model="fake", observation_type="a11y_tree", action_space="pyautogui")
    desktop = observation_folder(tmp_path / "obs")
    tasks = [OsworldTask(domain="os", example_id="x", instruction="Do x")]
    manifest = RunManifest.describe(config, root=tmp_path / "out", command=["my-script"])
    common: dict[str, Any] = {
        "config": config,
        "result_dir": tmp_path / "out",
        "make_agent": lambda task: PromptAgent.from_config(config, client=FakeClient(["DONE"])),
        "make_env": lambda task: in_thread(ReplayEnv(desktop, per_turn=True)),
        "max_steps": 3,
        "manifest": manifest,
    }
    asyncio.run(arun_task_list(tasks, **common))
    written = read_manifest(tmp_path / "out")
    assert written is not None
    assert (written["command"], written["workers"], written["tasks"]) == (["my-script"], 4, 1)
    assert written["prices_version"]
    other = RunManifest.describe(
        AgentConfig(model="fake", observation_type="som", action_space="pyautogui"),
        root=tmp_path / "out",
    )
    with pytest.raises(MixedRunError, match='observation_type "a11y_tree" then "som"'):
        asyncio.run(arun_task_list(tasks, **{**common, "manifest": other}))


def test_the_command_line_loses_its_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret options' values, URLs' users, passwords and queries, and the values of the
    environment's key variables are taken out of the recorded command line."""
    monkeypatch.setenv("ACME_API_KEY", "sk-acme-0123456789")
    words = [
        "--env-revert", "vmrun -gp pw revert", "--client-password=hunter2",
        "--base-url", "https://user:pw@llm.example.org:8443/v1?key=abc#x",
        "--note", "key sk-acme-0123456789 here", "--env-url", "http://[::1]:5000",
    ]  # fmt: skip
    assert redacted_command(words) == (
        "--env-revert", "[redacted]", "--client-password=[redacted]",
        "--base-url", "https://llm.example.org:8443/v1",
        "--note", "key [redacted] here", "--env-url", "http://[::1]:5000",
    )  # fmt: skip


def test_the_base_url_host_and_never_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest names the base URL's host (given, or the provider's default)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefghijkl")
    config = AgentConfig(model="gpt-4o")
    given = argparse.Namespace(base_url="https://k:s@proxy.example.org/v1", api_key_env=None,
                               model="gpt-4o", command_line=["osharm-agent"])  # fmt: skip
    assert command_manifest(given, config, "out", "osharm").base_url_host == "proxy.example.org"
    default = argparse.Namespace(base_url=None, api_key_env=None, model="gpt-4o")
    manifest = command_manifest(default, config, "out", "osharm")
    assert (manifest.base_url_host, manifest.provider) == ("api.openai.com", "openai")
    assert "sk-test" not in json.dumps(manifest.to_json())


def test_the_git_commit_is_read_from_git_files(tmp_path: Path) -> None:
    """A checkout's commit comes from its HEAD, a loose or packed ref, or a worktree's .git
    file; a folder that is no checkout has none."""
    commit, other = "a" * 40, "b" * 40
    git = tmp_path / "main" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(commit + "\n")
    assert git_commit(tmp_path / "main") == commit
    (git / "worktrees" / "wt").mkdir(parents=True)
    (git / "worktrees" / "wt" / "HEAD").write_text("ref: refs/heads/topic\n")
    (git / "worktrees" / "wt" / "commondir").write_text("../..\n")
    (git / "packed-refs").write_text(f"# pack-refs\n{other} refs/heads/topic\n")
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {git / 'worktrees' / 'wt'}\n")
    assert git_commit(tmp_path / "wt") == other
    (git / "HEAD").write_text(other + "\n")
    assert git_commit(tmp_path / "main") == other
    (git / "HEAD").write_text("ref: refs/../../etc\n")
    assert git_commit(tmp_path / "main") is None
    assert git_commit(tmp_path) is None
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fifo-repo").mkdir()
    os.symlink(tmp_path / "fifo", tmp_path / "fifo-repo" / ".git")
    assert git_commit(tmp_path / "fifo-repo") is None
