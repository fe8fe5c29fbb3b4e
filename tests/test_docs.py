"""The code in README.md and docs/*.md runs as written and prints what it says it prints.

Fences, by their info string:

- ```python runs; a page's blocks run in order in one namespace, from the
  repository root. Lines `# prints: TEXT` (at a line's end or alone) give the
  block's standard output, line by line (`...` matches anything, as in
  doctest); a block that prints must say what.
- ```sh runs each `osharm-agent ...` command through `adapters.cli.main`
  (`--out` and `--som-out` moved into a temporary folder); `python3 -m venv`
  and `pip install` are the set-up this test already runs in, and are passed
  over; anything else fails the test. `# prints:` lines work as for Python.
- ```python no-run and ```sh no-run need what a test cannot have (a model's
  key, a VM, a Ray cluster, a quiet machine): Python is compiled, nothing
  runs, and each is reported as a skip with the block's first comment line
  as the reason (`pytest -ra` lists them).

Other fences (```text, ```json, plain) are not code.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import itertools
import os
import re
import shlex
import tempfile
from pathlib import Path
from typing import Final

import attrs
import pytest

ROOT: Final = Path(__file__).parent.parent
PAGES: Final = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: The README's test command: lint, types and tests; the timing benchmarks are a step of their own.
TEST_COMMAND: Final = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test,ray]' && .venv/bin/ruff check . "
    "&& .venv/bin/ruff format --check . && .venv/bin/mypy && "
    '.venv/bin/pytest -n auto --dist loadfile -m "not benchmark_ratio"'
)
_FENCE: Final = re.compile(r"^```(\S*)(.*)$")
_PRINTS: Final = re.compile(r"#\s*prints:\s?(.*)$")
_SET_UP: Final = (("python3", "-m", "venv"), ("pip", "install"))
_OUTPUTS: Final = frozenset({"--out", "--som-out"})
_CHECKER: Final = doctest.OutputChecker()


@attrs.frozen
class Block:
    """One fenced block of a page: its language, whether it runs, where it starts, its code."""

    page: Path
    line: int
    language: str
    runs: bool
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def reason(self) -> str:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.lstrip("# ").strip() if first.startswith("#") else "marked no-run"

    @property
    def expected(self) -> list[str]:
        return [
            m.group(1).rstrip() for line in self.code.splitlines() if (m := _PRINTS.search(line))
        ]


def blocks(page: Path) -> list[Block]:
    """The ```python and ```sh blocks of `page`, in order."""
    found: list[Block] = []
    opened: tuple[int, str, str] | None = None
    lines: list[str] = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = _FENCE.match(line)
        if opened is None and fence:
            opened, lines = (number, fence.group(1), fence.group(2).strip()), []
        elif opened is not None and line.rstrip() == "```":
            start, language, rest = opened
            if language in ("python", "sh"):
                if rest not in ("", "no-run"):
                    raise AssertionError(f"{page.name}:{start}: unknown fence marker {rest!r}")
                found.append(Block(page, start, language, rest != "no-run", "\n".join(lines)))
            opened = None
        elif opened is not None:
            lines.append(line)
    assert opened is None, f"{page.name}: a fence opened at line {opened[0]} is never closed"
    return found


ALL_BLOCKS: Final = [block for page in PAGES for block in blocks(page)]
NOT_RUN: Final = [block for block in ALL_BLOCKS if not block.runs]
SHELL: Final = [block for block in ALL_BLOCKS if block.runs and block.language == "sh"]
PYTHON_PAGES: Final = [
    page for page in PAGES if any(b.runs and b.language == "python" for b in blocks(page))
]


def _check_output(block: Block, got: str) -> None:
    expected = block.expected
    if not expected and not got:
        return
    want = "\n".join(expected) + "\n" if expected else ""
    flags = doctest.ELLIPSIS
    assert _CHECKER.check_output(want, got, flags), (
        f"{block.where} prints:\n{got}\nbut says it prints:\n{want}"
    )


@pytest.fixture
def docs_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository root as the working directory, temporary files in `tmp_path`, no API keys."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)
    return tmp_path


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_run(page: Path, docs_run: Path) -> None:
    """Every runnable Python block of a page runs, in order in one namespace, printing what it says."""
    namespace: dict[str, object] = {"__name__": "docs_example"}
    for block in blocks(page):
        if not block.runs or block.language != "python":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.where, "exec"), namespace)
        _check_output(block, out.getvalue())


def _commands(code: str) -> list[list[str]]:
    """The commands of a shell block: lines joined at a trailing backslash, split at `&&`."""
    text = re.sub(
        r"\\\n", " ", "\n".join(line for line in code.splitlines() if not line.startswith("#"))
    )
    commands: list[list[str]] = []
    for line in text.splitlines():
        words = shlex.split(line)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1 :]
    return [command for command in commands if command]


def _set_up(command: list[str]) -> bool:
    name = [Path(command[0]).name, *command[1:]]
    return any(tuple(name[: len(step)]) == step for step in _SET_UP)


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.where)
def test_shell_examples_run(block: Block, docs_run: Path) -> None:
    """An offline shell example's osharm-agent commands exit 0 and print what the page says."""
    from adapters.cli import main

    out = io.StringIO()
    ran = 0
    for command in _commands(block.code):
        if _set_up(command):
            continue
        assert Path(command[0]).name == "osharm-agent", f"{block.where}: cannot run {command}"
        argv = [
            str(docs_run / word) if before in _OUTPUTS else word
            for before, word in itertools.pairwise(command)
        ]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0, f"{block.where}: {shlex.join(command)} failed"
        ran += 1
    assert ran, f"{block.where}: no osharm-agent command to run"
    _check_output(block, out.getvalue())


@pytest.mark.parametrize("block", NOT_RUN, ids=lambda b: b.where)
def test_blocks_marked_no_run(block: Block) -> None:
    """A no-run block says why in its first line, Python ones compile, and each is reported."""
    assert block.code.lstrip().startswith("#"), f"{block.where}: say why it cannot run offline"
    if block.language == "python":
        compile(block.code, block.where, "exec")
    pytest.skip(f"{block.where} not run: {block.reason}")


def test_few_blocks_are_not_run() -> None:
    """Most examples run: at most a quarter of the code blocks are marked no-run."""
    assert len(NOT_RUN) * 4 <= len(ALL_BLOCKS), [b.where for b in NOT_RUN]


def _anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _prose(page: Path) -> str:
    """The page without its fenced blocks."""
    kept, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def _anchors(page: Path) -> set[str]:
    text = _prose(page)
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_pages_resolve(page: Path) -> None:
    """Every relative link of a page names a file of the repository, and its #anchor a heading there."""
    text = _prose(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: no {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: no heading for {target}"


def test_every_docs_page_is_in_the_index() -> None:
    """docs/README.md links every other page of docs/."""
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        if page.name != "README.md":
            assert f"]({page.name})" in index, page.name


def test_readme_is_a_front_door() -> None:
    """README.md stays short (at most 400 lines); its test command runs no timing benchmark, docs/benchmarks.md has them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 400
    assert TEST_COMMAND in readme.splitlines()  # nothing chained after it
    assert "pytest -m benchmark_ratio -s" in (ROOT / "docs" / "benchmarks.md").read_text(
        encoding="utf-8"
    )
