"""Files the CLI is pointed at (--prices, --tasks and its examples, render's --a11y and
--screenshot, a task directory's task.json) are read through one bounded reader.

A FIFO used to block the command forever and /dev/zero to be read until memory ran out
(24 GB on a test box); each is now refused before a byte is read, and so is a file past its
cap (64 MiB for JSON, the trajectory cap for an observation), with the file named.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters._files import MAX_JSON_BYTES, append_fsynced, create_file, new_file, read_regular
from adapters.accounting.prices import PriceTable
from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.runs.tasks import load_task_list
from adapters.trajectories.jsonl import MAX_TRAJECTORY_BYTES
from osharm_core import ConfigError
from tests.conftest import child_environment
from tests.facade.helpers import observation_folder, write_task_list

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"
REPLAY = ["--model", f"replay:{EXAMPLE / 'trajectory.jsonl'}"]


def _prices(root: Path) -> tuple[Path, list[str], str]:
    out = ["--out", str(root / "out")]
    return root / "prices.json", ["run", str(EXAMPLE), *REPLAY, *out, "--prices"], "price table"


def _meta(root: Path) -> tuple[Path, list[str], str]:
    _, examples = write_task_list(root, {"os": ["a"]}, meta_name="ok.json")
    desktops = observation_folder(root / "desktops")
    argv = ["run-tasks", *REPLAY, "--examples", str(examples), "--observations", str(desktops)]
    return root / "meta.json", [*argv, "--out", str(root / "out"), "--tasks"], "task file"


def _example(root: Path) -> tuple[Path, list[str], str]:
    meta, examples = write_task_list(root, {"os": ["a"]})
    desktops = observation_folder(root / "desktops")
    argv = ["run-tasks", "--tasks", str(meta), *REPLAY, "--observations", str(desktops)]
    (examples / "os" / "a.json").unlink()
    return examples / "os" / "a.json", [*argv, "--out", str(root / "out"), "--examples"], ""


def _a11y(root: Path) -> tuple[Path, list[str], str]:
    return root / "tree.xml", ["render", "--instruction", "x", "--a11y"], "accessibility tree"


def _screenshot(root: Path) -> tuple[Path, list[str], str]:
    argv = ["render", "--instruction", "x", "--observation-type", "screenshot", "--screenshot"]
    return root / "shot.png", argv, "screenshot"


def _task_json(root: Path) -> tuple[Path, list[str], str]:
    task = observation_folder(root / "task")
    return task / "task.json", ["render", str(task), "--observation-type", "a11y_tree"], ""


#: Each input: the file to plant, the argv (the file is appended unless it is a task.json or an
#: example, which the command finds itself), what the error calls it, and its cap.
INPUTS: dict[str, tuple[Callable[[Path], tuple[Path, list[str], str]], int]] = {
    "prices": (_prices, MAX_JSON_BYTES),
    "task-list": (_meta, MAX_JSON_BYTES),
    "example": (_example, MAX_JSON_BYTES),
    "a11y": (_a11y, MAX_TRAJECTORY_BYTES),
    "screenshot": (_screenshot, MAX_TRAJECTORY_BYTES),
    "task-json": (_task_json, MAX_JSON_BYTES),
}


def _argv(name: str, root: Path) -> tuple[Path, list[str], str]:
    make, _ = INPUTS[name]
    file, argv, what = make(root)
    what = what or "task file"
    if name == "example":
        argv.append(str(file.parents[1]))
    elif name != "task-json":
        argv.append(str(file))
    return file, argv, what


@contextlib.contextmanager
def _no_hang(seconds: int = 20) -> Iterator[None]:
    """Fail (rather than hang the suite) when the code under test blocks on a FIFO."""

    def hung(signum: int, frame: Any) -> None:
        raise AssertionError("the command blocked reading its input")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_a_fifo_given_as_input_is_refused_not_waited_on(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file, argv, what = _argv(name, tmp_path)
    os.mkfifo(file)
    with _no_hang():
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {what} {file} is not a regular file" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_an_input_past_its_cap_is_refused_unread(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file, argv, what = _argv(name, tmp_path)
    cap = INPUTS[name][1]
    with file.open("wb") as handle:  # sparse: no disk space used
        handle.truncate(cap + 1)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {what} {file} is {cap + 1} bytes, over the {cap}-byte limit" in err


_CHILD = """
import json, sys
from adapters.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps(codes))
"""


def _memory_cap() -> None:
    cap = 3 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_dev_zero_as_any_input_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """All inputs at once, in a child process with a 3 GB address-space cap and a time limit,
    so a regression fails this test instead of exhausting the machine."""
    runs, expected = [], []
    for name in sorted(INPUTS):
        root = tmp_path / name
        root.mkdir()
        file, argv, what = _argv(name, root)
        file.symlink_to("/dev/zero")
        runs.append(argv)
        expected.append(f"error: {what} {file} is not a regular file")
    env = child_environment(api_keys=False)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(runs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_memory_cap,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [2] * len(runs)
    lines = done.stderr.splitlines()
    assert len(lines) == len(runs), done.stderr[-2000:]
    for line, words in zip(lines, expected, strict=True):
        assert words in line


def test_the_library_readers_refuse_a_fifo_with_their_own_error(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with _no_hang(), pytest.raises(ConfigError, match=r"price table .*fifo is not a regular"):
        PriceTable.from_file(fifo)
    with _no_hang(), pytest.raises(TrajectoryError, match=r"task file .*fifo is not a regular"):
        load_task_list(fifo, tmp_path)


# --- where os lacks the POSIX flags (Windows) ---------------------------------------------------

POSIX_ONLY = ("O_NONBLOCK", "O_NOCTTY", "O_NOFOLLOW", "O_CLOEXEC")


def test_the_file_helpers_work_where_os_lacks_the_posix_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' os has none of these: every read and write raised AttributeError there
    (--prices, task lists, recordings). A flag the OS lacks now counts as none; a link is
    still refused where links are not followed (checked with lstat first)."""
    for name in POSIX_ONLY:
        monkeypatch.delattr(os, name, raising=False)
    (tmp_path / "p.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected an object with a 'models' list"):
        PriceTable.from_file(tmp_path / "p.json")
    assert read_regular(tmp_path / "p.json", "x", 10) == b"{}"
    create_file(tmp_path / "made", b"data")
    with new_file(tmp_path / "streamed") as out:
        out.write(b"video")
    append_fsynced(tmp_path / "log", b"one\n")
    append_fsynced(tmp_path / "log", b"two\n")
    assert [(tmp_path / n).read_bytes() for n in ("made", "streamed", "log")] == [
        b"data",
        b"video",
        b"one\ntwo\n",
    ]
    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(TrajectoryError, match="link is a symbolic link; not following it"):
        read_regular(tmp_path / "link", "x", 100, TrajectoryError, follow_links=False)
    with pytest.raises(TrajectoryError, match="symbolic link; not appending through it"):
        append_fsynced(tmp_path / "link", b"x")
    with pytest.raises(ValueError, match="link already exists"):
        create_file(tmp_path / "link", b"x")
    assert victim.read_text(encoding="utf-8") == "precious"


def test_every_open_asks_for_binary_where_the_os_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows translates `\\n` to `\\r\\n` in files not opened with O_BINARY: a screenshot or a
    JSON line would be changed on disk. Every open of the helpers now asks for it."""
    binary = 1 << 30  # a bit no Linux open flag uses, stripped before the real open
    real_open = os.open
    seen: list[int] = []

    def spying_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        seen.append(flags)
        return real_open(path, flags & ~binary, *args, **kwargs)

    monkeypatch.setattr(os, "O_BINARY", binary, raising=False)
    monkeypatch.setattr(os, "open", spying_open)
    (tmp_path / "in").write_bytes(b"a\nb")
    read_regular(tmp_path / "in", "x", 10)
    read_regular(tmp_path / "in", "x", 10, follow_links=False)
    create_file(tmp_path / "new", b"a\n")
    append_fsynced(tmp_path / "log", b"a\n")
    monkeypatch.undo()
    assert len(seen) == 4
    assert all(flags & binary for flags in seen)
