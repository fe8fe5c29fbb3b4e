"""The README's Python examples run as written, and its quick start names real things."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The README and the pages of docs/, where its reference sections moved.
DOCS = "\n".join(
    [README, *(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))]
)


def _python_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if current is None and line == "```python":
            current = []
        elif current is not None and line == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The 'own loop' example runs from the repository root and prints the parsed action."""
    block = next(b for b in _python_blocks(README) if "prepare_step" in b)
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        exec(compile(block, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert capsys.readouterr().out.strip() == "['pyautogui.click(19, 31)']"


def test_quick_start_paths_exist() -> None:
    """The quick start's example task and recorded trajectory are in the repository."""
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Quick start"
    assert (ROOT / "examples/task/trajectory.jsonl").is_file()
    assert (ROOT / "examples/task/task.json").is_file()


def test_quick_start_quotes_its_own_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary the quick start quotes is what its command prints."""
    from adapters.cli import main

    quoted = " ".join(README.split("## Quick start")[1].split("\n## ")[0].split())
    start = quoted.index("`summary [task]: ")
    summary = quoted[start + 1 : quoted.index("; ...`", start)]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    argv = "run examples/task --model replay:examples/task/trajectory.jsonl --out runs/demo"
    assert main(argv.split()) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(summary + ";")


def test_rate_limiter_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared rate limiter example (docs/many-episodes.md) imports what it uses and gives every
    client the limiter (it named `REGISTRY` without importing it, from where `adapters` does not
    export it)."""
    block = next(b for b in _python_blocks(DOCS) if "RateLimiter(" in b)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-readme-example")
    names: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), names)
    clients = names["clients"]
    assert isinstance(clients, list)
    assert len(clients) == 8
    assert all(client.limiter is names["limiter"] for client in clients)


def test_development_names_files_a_clone_has() -> None:
    """Every repository path the Development section gives as a command exists in a clone."""
    section = README.split("## Development")[1]
    assert "pytest tests/test_purity.py" in section
    assert (ROOT / "tests" / "test_purity.py").is_file()
    assert "python ../shared" not in section  # not a command a clone can run
