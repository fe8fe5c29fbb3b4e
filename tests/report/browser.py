"""Headless Chromium for the report's browser tests: Debian's `chromium` driven by Playwright.

The browser is the system's (`/usr/bin/chromium`, or `OSHARM_CHROMIUM`), never one Playwright
downloads; a missing browser or Playwright package is an error saying what to install, not a
skipped test. Pages may load only `file:` URLs: any other request is aborted and recorded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

#: The browser the tests drive (`.ci/run` installs it with apt-get).
CHROMIUM: Final = Path(os.environ.get("OSHARM_CHROMIUM", "/usr/bin/chromium"))
ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)


class NoBrowser(RuntimeError):
    """The system's Chromium, or Playwright's Python package, is not installed."""


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's `Browser`), closed at the end of the block."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise NoBrowser(
            "the report's browser tests need Playwright's Python package: "
            "pip install -e '.[test]' (never `playwright install`: the system's Chromium is used)"
        ) from None
    if not CHROMIUM.is_file():
        raise NoBrowser(
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install -y chromium) "
            "or point OSHARM_CHROMIUM at a Chromium binary"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))
        try:
            yield browser
        finally:
            browser.close()


def offline_page(browser: Any, requests: list[str], width: int = 1400, height: int = 1000) -> Any:
    """A new page that may load `file:` URLs only; every other request is aborted and its URL
    appended to `requests`."""
    page = browser.new_page(viewport={"width": width, "height": height})

    def route(route: Any) -> None:
        url = route.request.url
        if url.startswith("file:"):
            route.continue_()
        else:
            requests.append(url)
            route.abort()

    page.route("**/*", route)
    return page


def box(page: Any, selector: str) -> tuple[float, float, float, float]:
    """The element's box in the page: x, y, width, height (CSS pixels)."""
    found = page.eval_on_selector(
        selector,
        "e => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }",
    )
    return found[0], found[1], found[2], found[3]
