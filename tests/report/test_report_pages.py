"""The report's pages: untrusted text escaped everywhere, nothing loaded from the network, the
screenshots linked where they are, the output folder handled safely."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from adapters.cli import main
from adapters.report import ReportError, build_report
from adapters.report.images import THUMB_WIDTH
from adapters.report.render import url_to
from tests.report.trees import HOSTILE, click, png, reply, result_folder, trajectory


def _hostile_tree(root: Path) -> Path:
    steps = [{"response": HOSTILE, "actions": [f"pyautogui.typewrite({HOSTILE!r})"],
              "safety_events": [{"kind": "flag", "step": 1, "source": "screen", "code": HOSTILE,
                                 "message": HOSTILE}]}]  # fmt: skip
    judgment = {"reasoning": HOSTILE, "success": False, "safety": False, "violation_step": 0}
    result_folder(root, "<b>dom</b>", "<i>id", steps, instruction=HOSTILE, judgment=judgment)
    return root


def _pages(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): p.read_text("utf-8") for p in out.rglob("*.html")}


def test_a_hostile_trajectory_renders_as_text(tmp_path: Path) -> None:
    """`</script><img onerror=...>` in a reply, instruction, action, verdict, safety event and
    folder names is escaped on every page: no tag of it reaches the HTML."""
    build_report(_hostile_tree(tmp_path / "run"), tmp_path / "out")
    pages = _pages(tmp_path / "out")
    assert set(pages) == {"index.html", "tasks/0001.html"}
    for name, html in pages.items():
        assert "<img src=x" not in html, name
        assert "window.__pwned=2</script>" not in html, name
        assert "<b>dom</b>" not in html, name
        assert "<i>id" not in html, name
        assert "&lt;/script&gt;&lt;img src=x onerror=" in html, name
    task = pages["tasks/0001.html"]
    assert task.count("&lt;/script&gt;&lt;img src=x onerror=") >= 5  # reply, instruction, ...
    assert "<script" not in task
    assert pages["index.html"].count("<script") == 1


def test_pages_load_nothing_from_the_network(tmp_path: Path) -> None:
    """No page names a URL off the disk, and each forbids the browser to fetch one."""
    steps = [{"response": reply(click(5, 5)), "actions": [click(5, 5)]}]
    result_folder(tmp_path / "run", "os", "a", steps, judgment={"safety": True})
    build_report(tmp_path / "run", tmp_path / "out")
    for name, html in _pages(tmp_path / "out").items():
        assert not re.search(r"""(src|href)=["']?(https?:|//)""", html), name
        assert "default-src 'none'" in html, name
        assert "@import" not in html, name
        assert "url(" not in html, name


def test_screenshots_are_linked_where_they_are(tmp_path: Path) -> None:
    """A task page's images are relative links to the screenshots in the result tree."""
    steps = [{"response": "a", "actions": [click(1, 2)]}, {"response": "DONE", "actions": ["DONE"]}]
    folder = result_folder(tmp_path / "run", "os", "a b#c", steps)
    build_report(tmp_path / "run", tmp_path / "elsewhere" / "out")
    page = tmp_path / "elsewhere" / "out" / "tasks" / "0001.html"
    sources = re.findall(r'<img src="([^"]+)"', page.read_text("utf-8"))
    assert [s.rsplit("/", 1)[-1] for s in sources] == ["step_0.png", "step_1_20260101%40120000.png"]
    assert (page.parent / sources[0].replace("%20", " ").replace("%23", "#")).resolve() == (
        folder / "step_0.png"
    ).resolve()
    assert url_to(folder / "step_0.png", page.parent) == sources[0]


def test_thumbnails_are_small_jpegs(tmp_path: Path) -> None:
    """Each task's thumbnail is a JPEG `THUMB_WIDTH` wide, of a few kilobytes."""
    steps = [{"response": "a", "actions": []}]
    result_folder(tmp_path / "run", "os", "a", steps, image=png(1920, 1080, label="desktop"))
    summary = build_report(tmp_path / "run", tmp_path / "out")
    data = (tmp_path / "out" / "thumbs" / "0001.jpg").read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size) == ("JPEG", (THUMB_WIDTH, 135))
    assert len(data) < 20_000
    assert summary.thumbnails == 1


def test_an_undecodable_screenshot_costs_only_its_thumbnail(tmp_path: Path) -> None:
    """A PNG whose pixels cannot be decoded has no thumbnail; the report is made all the same."""
    broken = png(64, 36)[:60]
    result_folder(tmp_path / "run", "os", "a", [{"response": "a", "actions": []}], image=broken)
    summary = build_report(tmp_path / "run", tmp_path / "out")
    assert (summary.tasks, summary.thumbnails) == (1, 0)


def test_the_output_folder_is_made_replaced_or_refused(tmp_path: Path) -> None:
    """A report goes to RESULT_DIR/report by default and is not read back as a task; a new one
    replaces its pages; a folder holding other files is refused."""
    run = tmp_path / "run"
    for name in ("a", "b"):
        trajectory(run / name, [{"response": "DONE", "actions": ["DONE"]}])
    first = build_report(run)
    assert (first.out, first.tasks) == (run / "report", 2)
    (run / "b" / "trajectory.jsonl").unlink()
    (run / "b" / "finished.json").unlink()
    again = build_report(run)
    assert again.tasks == 1
    assert sorted(p.name for p in (run / "report" / "tasks").iterdir()) == ["0001.html"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ReportError, match="holds files that are not a report"):
        build_report(run, tmp_path / "mine")
    with pytest.raises(ReportError, match="no result folder"):
        build_report(tmp_path / "nowhere")


def test_the_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`osharm-agent report RESULT_DIR -o OUT` says where to open it; a bad OUT is one line."""
    trajectory(tmp_path / "run", [{"response": "DONE", "actions": ["DONE"]}])
    assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("report: 1 task(s), 1 step(s), 0.0 MB; open ")
    assert out.rstrip().endswith(str(tmp_path / "out" / "index.html"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "holds files that are not a report" in err


def test_the_templates_ship_in_the_package() -> None:
    """Every file of the report's templates folder is package data in pyproject.toml."""
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["adapters.report"]
    folder = root / "adapters" / "report" / "templates"
    for file in folder.iterdir():
        name = f"templates/{file.name}"
        assert any(fnmatch.fnmatch(name, glob) for glob in globs), name
