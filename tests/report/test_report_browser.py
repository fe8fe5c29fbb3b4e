"""The report in a real browser: headless Chromium (the system's, driven by Playwright) opens it
from disk, lists every task, filters and sorts the table, and draws each click where it was.

A missing browser fails these tests, saying what to install; it never skips them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.report import build_report
from osharm_core import CoordinateFrame
from tests.report.browser import box, chromium, offline_page
from tests.report.screenshot import demo_tree, save_task_page
from tests.report.trees import HOSTILE, click, plain_folder, png, reply, result_folder, trajectory

UNSAFE = {
    "reasoning": "It mailed the notes.",
    "success": True,
    "safety": False,
    "violation_step": 1,
}
SAFE = {"reasoning": "Fine.", "success": True, "safety": True, "violation_step": None}
SCALED = CoordinateFrame(screen_width=1920, screen_height=1080, image_width=1280, image_height=720)


def _tree(root: Path) -> Path:
    """Five tasks of every kind: two OS-Harm folders (one unsafe, with a safety event), a scaled
    set-of-marks trajectory, a plain OSWorld folder and an unreadable folder."""
    full = png(1920, 1080, label="1920x1080")
    three = "\n".join(click(x, 700) for x in (200, 400, 600))
    result_folder(root, "chrome", "_mail", [
        {"response": reply(click(960, 540)), "actions": [click(960, 540)]},
        {"response": reply(three), "actions": [three], "safety_events": [
            {"kind": "flag", "step": 2, "source": "monitor", "code": "prompt_injection",
             "message": "a notification asks for the file"}]},
    ], image=full, judgment=UNSAFE, result="0.0")  # fmt: skip
    result_folder(root, "os", "_ok", [{"response": "DONE", "actions": ["DONE"]}], judgment=SAFE)
    trajectory(root / "local" / "_scaled", [
        {"response": reply("pyautogui.click(tag_2)\npyautogui.click(1500, 300)"),
         "actions": ["tag_2 = (330, 220)\npyautogui.click(tag_2)\npyautogui.click(1500, 300)"],
         "masks": [[10, 10, 100, 50], [300, 200, 60, 40]]},
        {"response": HOSTILE, "actions": ["DONE"]},
    ], image=png(1280, 720, label="sent at 1280x720"), frame=SCALED, som=True)  # fmt: skip
    plain_folder(root / "vlc" / "_plain", [[click(10, 10)], [click(20, 20)], ["DONE"]])
    broken = result_folder(root, "gimp", "_broken", [{"response": "", "actions": []}])
    (broken / "better_log.json").write_text("[", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of `_tree`, built once for the module."""
    root = _tree(tmp_path_factory.mktemp("results"))
    summary = build_report(root, root.parent / "report")
    assert (summary.tasks, summary.unreadable) == (5, 1)
    return summary.out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    with chromium() as running:
        yield running


@pytest.fixture
def requests() -> Iterator[list[str]]:
    """The URLs off the disk a test's pages asked for (none may be)."""
    asked: list[str] = []
    yield asked
    assert asked == []


def _visible(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        "#tasks tbody tr:not([hidden]) td:nth-child(2) a", "links => links.map(a => a.textContent)"
    )


def test_the_table_lists_every_task_and_its_filters_work(
    browser: Any, report: Path, requests: list[str]
) -> None:
    """Every task is a row; each filter (domain, outcome, verdict, safety events, text) keeps
    the rows it names, and sorting by steps orders them."""
    page = offline_page(browser, requests)
    page.goto((report / "index.html").as_uri())
    assert sorted(_visible(page)) == ["_broken", "_mail", "_ok", "_plain", "_scaled"]
    assert page.inner_text("#shown") == "5 of 5"
    for selector, value, expected in [
        ("domain", "chrome", ["_mail"]),
        ("outcome", "unreadable", ["_broken"]),
        ("verdict", "unsafe", ["_mail"]),
        ("verdict", "safe", ["_ok"]),
        ("safety", "yes", ["_mail"]),
        ("outcome", "success", ["_ok", "_scaled"]),
    ]:
        page.select_option(f"[data-filter={selector}]", value)
        assert sorted(_visible(page)) == expected, (selector, value)
        page.select_option(f"[data-filter={selector}]", "")
    page.fill("[data-filter=text]", "open the file")
    assert sorted(_visible(page)) == ["_mail", "_ok", "_scaled"]  # the others record none
    page.fill("[data-filter=text]", "")
    page.click("th:has-text('Steps')")
    assert (_visible(page)[0], _visible(page)[-1]) == ("_broken", "_plain")  # 0 ... 3 steps
    page.click("th:has-text('Steps')")
    assert (_visible(page)[0], _visible(page)[-1]) == ("_plain", "_broken")
    assert page.get_attribute("th:has-text('Steps')", "aria-sort") == "descending"


def _open(page: Any, report: Path, name: str) -> None:
    """The task page of `name`, reached from the table's link."""
    page.goto((report / "index.html").as_uri())
    page.click(f"#tasks a:text-is('{name}')")
    page.wait_for_load_state("load")
    assert page.inner_text("h1").startswith(name)


def _loaded_width(page: Any, step: int) -> int:
    """The width of step `step`'s screenshot as the browser decoded it from the result tree."""
    width: int = page.eval_on_selector(
        f"#step-{step} figure.shot img", "i => i.decode().then(() => i.naturalWidth)"
    )
    return width


def _marker_lands_on(page: Any, step: int, index: int, x: float, y: float) -> None:
    image = box(page, f"#step-{step} figure.shot img")
    marker = box(page, f"#step-{step} figure.shot .mark >> nth={index}")
    width, height = page.eval_on_selector(
        f"#step-{step} figure.shot", "f => [+f.dataset.screenWidth, +f.dataset.screenHeight]"
    )
    centre = (marker[0] + marker[2] / 2, marker[1] + marker[3] / 2)
    expected = (image[0] + x * image[2] / width, image[1] + y * image[3] / height)
    assert centre == pytest.approx(expected, abs=1.5)


def test_a_click_marker_sits_on_the_clicked_pixel(
    browser: Any, report: Path, requests: list[str]
) -> None:
    """The screenshot loads from the result tree and each click's marker is at its point,
    scaled by the image's displayed size; several clicks are numbered."""
    page = offline_page(browser, requests)
    _open(page, report, "_mail")
    assert _loaded_width(page, 1) == 1920
    _marker_lands_on(page, 1, 0, 960, 540)
    for index, x in enumerate((200, 400, 600)):
        _marker_lands_on(page, 2, index, x, 700)
    assert page.eval_on_selector_all("#step-2 .mark", "m => m.map(e => e.textContent)") == [
        "1",
        "2",
        "3",
    ]
    assert "violation" in (page.get_attribute("#step-2", "class") or "")
    assert "prompt_injection" in page.inner_text("#step-2 ul.safety")


def test_a_scaled_set_of_marks_step_lands_on_the_screen_pixel(
    browser: Any, report: Path, requests: list[str]
) -> None:
    """On a screenshot sent at 1280x720 of a 1920x1080 screen, a click at screen pixel
    (1500, 300) is drawn at 1500/1920 of the picture's width; the tag's box is highlighted."""
    page = offline_page(browser, requests)
    _open(page, report, "_scaled")
    assert _loaded_width(page, 1) == 1280
    _marker_lands_on(page, 1, 0, 330, 220)
    _marker_lands_on(page, 1, 1, 1500, 300)
    assert page.eval_on_selector_all("#step-1 rect.box.used", "r => r.length") == 1
    assert "tag 2" in page.inner_text("#step-1 ul.marks")


def test_a_hostile_reply_is_text_in_the_browser(
    browser: Any, report: Path, requests: list[str]
) -> None:
    """A reply holding `</script><img onerror=...>` shows as text and runs nothing."""
    page = offline_page(browser, requests)
    _open(page, report, "_scaled")
    assert HOSTILE in page.inner_text("#step-2 .reply")
    assert page.evaluate("window.__pwned") is None
    assert page.eval_on_selector_all("img[onerror], img[src=x]", "found => found.length") == 0


def test_a_task_page_picture_is_saved(browser: Any, report: Path, tmp_path: Path) -> None:
    """A PNG of a task page is kept as the test's artifact (and `python -m
    tests.report.screenshot` writes the same kind of picture to docs/report.png)."""
    tree = demo_tree(tmp_path / "results")
    picture = save_task_page(tree, tmp_path / "report", tmp_path / "page.png", browser)
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert picture.stat().st_size > 20_000
