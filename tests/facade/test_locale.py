"""osharm-agent under an ASCII locale (`LC_ALL=C PYTHONUTF8=0`): file names, standard
streams and the file system's encoding are ASCII, so what cannot be written is a clear error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import CLI_CHILD, OBSERVATIONS, child_environment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"


def _ascii_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """osharm-agent in a child process under the C locale with UTF-8 mode off."""
    env = child_environment(api_keys=False)
    env.pop("PYTHONIOENCODING", None)
    env.update(LANG="C", LC_ALL="C", PYTHONUTF8="0")
    # The repository first on the path: an editable install's finder keeps the clone's path
    # as text, which the ASCII file system cannot encode when the clone's path is not ASCII.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [*CLI_CHILD, *argv],
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_quick_start_runs_under_an_ascii_locale(tmp_path: Path) -> None:
    done = _ascii_cli(
        "run", str(EXAMPLE),
        "--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}",
        "--out", "runs/demo",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("ascii").splitlines()[-1].startswith("summary [task]: 2 step(s)")
    assert (tmp_path / "runs" / "demo" / "trajectory.jsonl").is_file()


def test_a_task_id_the_file_system_cannot_encode_is_one_escaped_error_line(
    tmp_path: Path,
) -> None:
    """A result folder named by a task id holding U+202E and an escape: `the file system cannot
    encode it`, on one line of ASCII, before any step; no traceback."""
    task = tmp_path / "task"
    task.mkdir()
    shutil.copyfile(OBSERVATIONS / "mousepad_notes.xml", task / "01.xml")
    evil = "caf\xe9\u202e\x1b]0;T\x07"
    (task / "task.json").write_text(
        json.dumps({"instruction": "do it", "id": evil}), encoding="utf-8"
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    done = _ascii_cli(
        "run", str(task),
        "--model", f"replay:{script}",
        "--format", "osharm",
        "--observation-type", "a11y_tree",
        "--out", str(tmp_path / "o"),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.decode("ascii").splitlines()
    assert line.startswith("osharm-agent: error: task ")
    assert "caf\\xe9\\u202e\\x1b]0;T\\x07" in line
    assert line.endswith("cannot name a result folder (the file system cannot encode it)")
    assert done.stdout == b""
    assert not (tmp_path / "o").exists()
