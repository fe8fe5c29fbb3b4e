"""Hostile accessibility trees: DTDs anywhere, any declared encoding, absurd numbers.

Every input gets an `AccessibilityTreeError` or a safe result; nothing is read from
a file or a URL, nothing hangs (FIFOs and /dev/zero would), nothing raw escapes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.cli import main
from osharm_core.accessibility import (
    MAX_NUMBER_CHARS,
    MAX_PAIR_CHARS,
    linearize_accessibility_tree,
    parse_accessibility_tree,
    parse_pair,
    parse_without_dtd,
)
from osharm_core.errors import AccessibilityTreeError
from osharm_core.marks import tag_screenshot
from tests.conftest import OBSERVATIONS
from tests.hostile.conftest import forbidding_io
from tests.strategies import CODEC_NAMES, doctype_prefixes, huge_numbers

SCREENSHOT = (OBSERVATIONS / "xfce4_terminal_shell.png").read_bytes()
NS = (
    'xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"'
)


def _doctypes(target: str) -> list[str]:
    """DOCTYPEs that make libxml2 open `target`: parameter entity, external subset, entity."""
    return [
        f'<!DOCTYPE r [<!ENTITY % pe SYSTEM "{target}"> %pe;]><r/>',
        f'<!DOCTYPE r SYSTEM "{target}"><r/>',
        f'<!DOCTYPE r PUBLIC "-//x//y" "{target}"><r/>',
        f'<!DOCTYPE r [<!ENTITY e SYSTEM "{target}">]><r a="&e;">&e;</r>',
    ]


def _finishes(work: Callable[[], Any], fifo: Path, seconds: float = 10) -> Any:
    """Run `work` in a thread; fail (after releasing the FIFO) if it blocks past `seconds`."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    if worker.is_alive():
        with open(
            fifo, "w", encoding="utf-8"
        ) as unblock:  # the FIFO was opened for reading: let it go
            unblock.write("x")
        worker.join(timeout=seconds)
        pytest.fail("the parse blocked on a FIFO it should never have opened")
    return outcome[0]


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A named pipe: opening it for reading blocks until someone writes."""
    path = tmp_path_factory.mktemp("fifo") / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("doctype", range(4))
@pytest.mark.parametrize("prefix", ["\ufeff", "\ufeff\ufeff", " \ufeff", "<!--c-->\ufeff"])
def test_bom_prefixed_doctype_never_opens_the_file(fifo: Path, doctype: int, prefix: str) -> None:
    """A DOCTYPE after one or two byte-order marks is refused without opening its FIFO, as str and bytes."""
    document = prefix + _doctypes(f"file://{fifo}")[doctype]
    for form in (document, document.encode("utf-8"), b"\xef\xbb\xbf" + document.encode()):
        result = _finishes(lambda form=form: parse_accessibility_tree(form), fifo)
        assert isinstance(result, AccessibilityTreeError)
        assert "DOCTYPE" in str(result)


@pytest.mark.parametrize("doctype", range(4))
def test_the_parser_alone_refuses_without_the_string_check(fifo: Path, doctype: int) -> None:
    """Without the fast string check, the parser's resolver and docinfo check still refuse, reading nothing."""
    document = ("\ufeff" + _doctypes(f"file://{fifo}")[doctype]).encode("utf-8")
    result = _finishes(lambda: parse_without_dtd(document), fifo)
    assert isinstance(result, AccessibilityTreeError)


def test_the_parser_alone_never_fetches_urls(counting_server: tuple[str, list[str]]) -> None:
    """SYSTEM ids naming a loopback URL are answered by the resolver; the server sees no request."""
    url, hits = counting_server
    for document in _doctypes(f"{url}/dtd"):
        with pytest.raises(AccessibilityTreeError):
            parse_without_dtd(("\ufeff" + document).encode())
    assert hits == []


def test_dev_zero_parameter_entity_does_not_spin() -> None:
    """A parameter entity at /dev/zero (an endless read in C) is refused in a fresh process within seconds."""
    code = (
        "from osharm_core.accessibility import parse_without_dtd\n"
        "from osharm_core.errors import AccessibilityTreeError\n"
        "doc = '\\ufeff<!DOCTYPE r [<!ENTITY % pe SYSTEM \"/dev/zero\"> %pe;]><r/>'.encode()\n"
        "try:\n    parse_without_dtd(doc)\nexcept AccessibilityTreeError:\n    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "refused", done.stderr


@settings(max_examples=100)
@given(prefix=doctype_prefixes(), doctype=st.integers(0, 3))
def test_any_prefix_before_a_doctype_is_refused(fifo: Path, prefix: str, doctype: int) -> None:
    """Whatever opens the document (BOMs, space, comments, PIs, declarations), a DOCTYPE is refused unread."""
    document = prefix + _doctypes(f"file://{fifo}")[doctype]
    for form in (document, document.encode("utf-8")):
        result = _finishes(lambda form=form: parse_accessibility_tree(form), fifo)
        assert isinstance(result, AccessibilityTreeError)
        result = _finishes(lambda form=form: parse_without_dtd(_utf8(form)), fifo)
        assert isinstance(result, AccessibilityTreeError)


def _utf8(form: str | bytes) -> bytes:
    return form.encode("utf-8") if isinstance(form, str) else form


@given(name=CODEC_NAMES)
def test_any_declared_encoding_parses_or_is_refused(name: str) -> None:
    """A bytes tree declaring any codec (text, base64, zlib, rot13, unknown) parses or gets the typed error."""
    document = f'<?xml version="1.0" encoding="{name}"?><desktop-frame name="x"/>'.encode()
    outcome: object
    with forbidding_io():
        try:
            outcome = parse_accessibility_tree(document).tag
        except AccessibilityTreeError as exc:
            outcome = str(exc)
    assert outcome == "desktop-frame" or str(outcome).startswith("accessibility tree")


@pytest.mark.parametrize("name", ["base64", "rot13", "zlib", "hex", "uu", "bz2", "quopri"])
def test_non_text_codecs_are_named_in_the_error(name: str) -> None:
    """A codec that is not a text encoding is refused with an error that names it."""
    document = f'<?xml version="1.0" encoding="{name}"?><r/>'.encode()
    with pytest.raises(AccessibilityTreeError, match="not a text encoding"):
        parse_accessibility_tree(document)


def _button(position: str, size: str) -> str:
    return (
        f'<desktop-frame {NS}><push-button name="b" st:visible="true" st:showing="true" '
        f'st:enabled="true" cp:screencoord="{position}" cp:size="{size}">x</push-button>'
        "</desktop-frame>"
    )


@settings(max_examples=60)
@given(number=huge_numbers(), where=st.sampled_from(["x", "y", "w", "h"]))
def test_huge_coordinates_drop_the_node(number: str, where: str) -> None:
    """A coordinate of any length never raises: past MAX_NUMBER_CHARS characters its node is dropped."""
    values = dict.fromkeys("xywh", "10") | {where: number}
    xml = _button(f"({values['x']}, {values['y']})", f"({values['w']}, {values['h']})")
    with forbidding_io():
        table = linearize_accessibility_tree(xml)
        marks = tag_screenshot(SCREENSHOT, xml)
    kept = len(number) <= MAX_NUMBER_CHARS
    assert (table.count("\n") == 1) is kept
    assert len(marks.masks) <= int(kept)  # a kept box may still be skipped as one colour


@pytest.mark.parametrize("text", ["(" + "1" * 5000 + ", 2)", "(1, -" + "7" * 4301 + ")"])
def test_parse_pair_is_total_on_huge_integers(text: str) -> None:
    """The strict pair reader gives None for integers past the limit instead of a ValueError."""
    assert parse_pair(text) is None


@pytest.mark.parametrize(
    "text",
    ["(1, " + "1" * 1_000_000 + "e", "(1, " + "1_" * 500_000 + ")", "(" + " " * 200 + "1, 2)"],
)
def test_a_pair_text_past_max_pair_chars_is_refused_unread(text: str) -> None:
    """Refused by its length before any pattern runs: the general pattern took seconds and
    gigabytes over megabytes of digits (9 MB: 6 s, 2.6 GB), once per node."""
    assert len(text) > MAX_PAIR_CHARS
    assert parse_pair(text) is None
    assert parse_pair("(" + " " * 50 + "1, 2)") == (1, 2)


def test_render_refuses_a_bom_prefixed_hostile_file(
    tmp_path: Path, fifo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`osharm-agent render` on an .xml file starting with a BOM and a DTD ends in one stderr line, not a hang."""
    tree = tmp_path / "hostile.xml"
    tree.write_bytes(b"\xef\xbb\xbf" + _doctypes(f"file://{fifo}")[0].encode())
    argv = ["render", "--a11y", str(tree), "--instruction", "x", "--observation-type", "a11y_tree"]
    status = _finishes(lambda: main(argv), fifo)
    assert status != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "DOCTYPE" in err
