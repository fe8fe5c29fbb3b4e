"""The run manifest of a task list run on Ray: written by the driver at the shared result root."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.cli import main
from adapters.runs.manifest import read_manifest
from tests.facade.helpers import observation_folder, write_task_list

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'osharm-core[ray]')")
from tests.facade.test_ray_runner import cluster  # noqa: F401  (the fixture)


@pytest.mark.usefixtures("cluster")
def test_run_tasks_on_ray_records_the_address_and_workers(tmp_path: Path) -> None:
    """`run-tasks --ray` writes manifest.json with Ray's address, its workers and outcomes."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    script = tmp_path / "replies.jsonl"
    script.write_text('{"response": "DONE"}\n', encoding="utf-8")
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(observation_folder(tmp_path / "obs")),
        "--model", f"replay:{script}", "--observation-type", "a11y_tree",
        "--out", str(tmp_path / "results"), "--workers", "2", "--ray", "auto",
        "--ray-cpus-per-worker", "0.5",
    ]  # fmt: skip
    assert main(argv) == 0
    manifest = read_manifest(tmp_path / "results")
    assert manifest is not None
    assert (manifest["ray_address"], manifest["workers"], manifest["tasks"]) == ("auto", 2, 2)
    assert [o["status"] for o in manifest["outcomes"]] == ["finished", "finished"]
    assert manifest["ended"] is not None
