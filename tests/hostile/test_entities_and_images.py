"""Hostile trees and images: refused quickly with typed errors, never expanded, read or fetched."""

from __future__ import annotations

import io
import os
import struct
import threading
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image

from osharm_core.accessibility import linearize_accessibility_tree, parse_accessibility_tree
from osharm_core.errors import AccessibilityTreeError, ScreenshotError
from osharm_core.marks import open_screenshot, tag_screenshot
from tests.conftest import OBSERVATIONS, png_chunk, png_claiming

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL_TREE = '<desktop-frame><label name="x"/></desktop-frame>'


def billion_laughs(declaration: str = '<?xml version="1.0"?>') -> str:
    """Nine levels of tenfold entities: a billion "lol"s once expanded, in text and an attribute."""
    levels = "".join(
        f'<!ENTITY lol{i} "{("&lol" + ("" if i == 1 else str(i - 1)) + ";") * 10}">'
        for i in range(1, 10)
    )
    return (
        f'{declaration}<!DOCTYPE lolz [<!ENTITY lol "lol">{levels}]>'
        '<lolz name="&lol9;">&lol9;</lolz>'
    )


def encodings_of(xml: str) -> list[str | bytes]:
    """The same document as str, UTF-8, UTF-16 with and without a BOM, and EBCDIC."""
    declared = xml.replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="UTF-16"?>')
    ebcdic = xml.replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="IBM037"?>')
    return [
        xml,
        xml.encode(),
        xml.encode("utf-16"),
        declared.encode("utf-16-le"),
        declared.encode("utf-16-be"),
        ebcdic.encode("cp037"),
    ]


# --- entities and DTDs -------------------------------------------------------------------


@pytest.mark.parametrize("document", encodings_of(billion_laughs()))
def test_billion_laughs_is_refused_at_once(document: str | bytes) -> None:
    """A billion-laughs tree, in any encoding, is refused as a DOCTYPE before any expansion."""
    start = time.perf_counter()
    with pytest.raises(AccessibilityTreeError, match="DOCTYPE") as info:
        parse_accessibility_tree(document)
    assert time.perf_counter() - start < 1
    assert "lol" not in str(info.value)


def test_billion_laughs_in_tagging() -> None:
    """Set-of-marks refuses the same tree with the same typed error."""
    screenshot = (OBSERVATIONS / "xfce4_terminal_shell.png").read_bytes()
    with pytest.raises(AccessibilityTreeError, match="DOCTYPE"):
        tag_screenshot(screenshot, billion_laughs())


def test_file_entity_is_never_read(tmp_path: Path) -> None:
    """An external entity naming a file is refused without opening it (a FIFO would block)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT", encoding="utf-8")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (secret, fifo):
        xml = (
            f'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file://{target}">]>'
            '<r name="&x;"><label name="&x;">&x;</label></r>'
        )
        for document in encodings_of(xml):
            outcome: list[BaseException | str] = []

            def parse(
                doc: str | bytes = document, out: list[BaseException | str] = outcome
            ) -> None:
                try:
                    out.append(linearize_accessibility_tree(doc))
                except BaseException as exc:
                    out.append(exc)

            worker = threading.Thread(target=parse, daemon=True)
            worker.start()
            worker.join(timeout=10)
            if worker.is_alive():  # the parser opened the FIFO: release it, then fail
                with open(fifo, "w", encoding="utf-8") as unblock:
                    unblock.write("x")
                pytest.fail(f"parser opened {target}")
            (result,) = outcome
            assert isinstance(result, AccessibilityTreeError)
            assert "TOP-SECRET" not in str(result)


@pytest.mark.parametrize(
    "template",
    [
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "{url}/entity">]><r>&x;</r>',
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "{url}/attr">]><r a="&x;"/>',
        '<?xml version="1.0"?><!DOCTYPE r SYSTEM "{url}/external.dtd"><r>&x;</r>',
        '<?xml version="1.0"?><!DOCTYPE r PUBLIC "-//X//Y" "{url}/public.dtd"><r/>',
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY % p SYSTEM "{url}/param"> %p;]><r>&x;</r>',
        '<?xml version="1.0"?><!-- c --><?pi x?><!DOCTYPE r [<!ENTITY x SYSTEM "{url}/late">]><r>&x;</r>',
    ],
)
def test_url_entity_is_never_fetched(counting_server: tuple[str, list[str]], template: str) -> None:
    """Entities and DTDs pointing at a local server are refused; the server sees no request."""
    url, hits = counting_server
    xml = template.replace("{url}", url)
    screenshot = (OBSERVATIONS / "xfce4_terminal_shell.png").read_bytes()
    for document in encodings_of(xml):
        with pytest.raises(AccessibilityTreeError, match="DOCTYPE"):
            linearize_accessibility_tree(document)
        with pytest.raises(AccessibilityTreeError, match="DOCTYPE"):
            tag_screenshot(screenshot, document)
    assert hits == []


def test_xinclude_is_not_processed(counting_server: tuple[str, list[str]]) -> None:
    """An XInclude element is just an element: nothing is fetched or inserted."""
    url, hits = counting_server
    xml = (
        '<r xmlns:xi="http://www.w3.org/2001/XInclude">'
        f'<xi:include href="{url}/include" parse="text"/></r>'
    )
    assert linearize_accessibility_tree(xml).count("\n") == 0
    assert hits == []


def test_unknown_declared_encoding_is_refused() -> None:
    """A declaration naming an encoding nobody knows is a typed error naming it."""
    with pytest.raises(AccessibilityTreeError, match="x-no-such"):
        parse_accessibility_tree(b'<?xml version="1.0" encoding="x-no-such"?><r/>')


def test_utf7_cannot_hide_a_doctype() -> None:
    """A DOCTYPE spelled in UTF-7 is decoded first and refused like any other."""
    hidden = billion_laughs("").replace("<!DOCTYPE", "+ADwAIQ-DOCTYPE", 1)
    data = b'<?xml version="1.0" encoding="UTF-7"?>' + hidden.encode("ascii")
    assert b"<!DOCTYPE" not in data
    assert "<!DOCTYPE" in data.decode("utf-7")
    with pytest.raises(AccessibilityTreeError, match="DOCTYPE"):
        parse_accessibility_tree(data)


# --- malformed and oversized trees -----------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "where"),
    [
        (b"<r><label name='x'></r>", "line 1"),
        (b"<r>\n\n<label name='a' name='b'/></r>", "line 3"),
        (b"<r>\x00</r>", "line 1"),
        (b"<r name='\xff\xfe'/>", "line 1"),
        (b"<r>&#0;</r>", "line 1"),
        (b"<r>" + b"<a>" * 10, "line 1"),
        (b"\xef\xbb\xbf", "line 1"),
    ],
)
def test_malformed_trees_raise_typed_errors(document: bytes, where: str) -> None:
    """Malformed bytes raise AccessibilityTreeError with the place lxml found wrong."""
    with pytest.raises(AccessibilityTreeError, match=where):
        linearize_accessibility_tree(document)


_UBUNTU = (
    'xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"'
)


def _nested_buttons(depth: int) -> str:
    """`depth` push buttons, each inside the one before, every one kept by the filter."""
    shown = 'st:showing="true" st:visible="true" st:enabled="true" cp:size="(8, 8)"'
    opened = "".join(
        f'<push-button name="b{i}" {shown} cp:screencoord="({i}, 0)">' for i in range(depth)
    )
    return f"<r {_UBUNTU}>{opened}{'</push-button>' * depth}</r>"


@pytest.mark.parametrize("depth", [257, 300, 2047])
def test_deep_trees_are_linearized_as_the_reference_does(depth: int) -> None:
    """Nesting past libxml2's default 256 levels is linearized, a row per kept node in
    document order, as the reference's ElementTree reads it."""
    rows = linearize_accessibility_tree(_nested_buttons(depth)).splitlines()[1:]
    assert [row.split("\t")[1] for row in rows] == [f"b{i}" for i in range(depth)]
    noise = io.BytesIO()
    Image.effect_noise((64, 64), 60).save(noise, "PNG")
    assert len(tag_screenshot(noise.getvalue(), _nested_buttons(depth)).masks) <= depth


@pytest.mark.parametrize("depth", [2049, 100_000])
def test_a_tree_past_the_depth_bound_is_refused_with_a_typed_error(depth: int) -> None:
    """Nesting past 2,048 levels is refused as a parser limit naming the bound, not a crash."""
    deep = "<label>" * depth + "</label>" * depth
    with pytest.raises(AccessibilityTreeError, match="nesting up to 2,048 levels"):
        linearize_accessibility_tree(deep)


def test_a_deep_tree_keeps_the_value_limit() -> None:
    """A tree parsed again for its depth still refuses a single value over 10 MB."""
    value = "x" * (11 * 1024 * 1024)
    deep = "<a>" * 300 + f'<b name="{value}"/>' + "</a>" * 300
    with pytest.raises(AccessibilityTreeError, match="parser's limits: it holds a value too long"):
        parse_accessibility_tree(deep)


@pytest.mark.parametrize("where", ["text", "attribute"])
def test_huge_single_value_is_refused(where: str) -> None:
    """A single text or attribute value over 10 MB is refused as a parser limit."""
    value = "x" * (11 * 1024 * 1024)
    xml = f"<r>{value}</r>" if where == "text" else f'<r name="{value}"/>'
    with pytest.raises(AccessibilityTreeError, match="parser's limits"):
        parse_accessibility_tree(xml)


def test_fifty_megabyte_tree_parses_in_reasonable_time() -> None:
    """A 50 MB tree of 100,000 elements is parsed and linearized in seconds, every row present."""
    shown = (
        'st:showing="true" st:visible="true" st:enabled="true" '
        'cp:screencoord="(10, 20)" cp:size="(30, 40)"'
    )
    padding = "p" * 420
    rows = [
        f'<static name="row {i} {padding}" {shown if i % 2 else ""}>cell {i}</static>'
        for i in range(100_000)
    ]
    xml = (
        '<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
        'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
        + "".join(rows)
        + "</desktop-frame>"
    ).encode()
    del rows
    assert len(xml) >= 50_000_000
    start = time.perf_counter()
    text = linearize_accessibility_tree(xml)
    elapsed = time.perf_counter() - start
    print(f"\n50 MB tree ({len(xml) / 1e6:.1f} MB): linearized in {elapsed:.2f} s")
    assert text.count("\n") == 50_000
    assert elapsed < 30


# --- hostile screenshots ---------------------------------------------------------------------


def test_png_claiming_ten_billion_pixels_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-made PNG claiming 100k x 100k pixels is refused from its header, whatever Pillow allows."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    bomb = png_claiming(100_000, 100_000)
    assert len(bomb) < 200
    start = time.perf_counter()
    with pytest.raises(ScreenshotError, match="100000 x 100000") as info:
        tag_screenshot(bomb, SMALL_TREE)
    assert time.perf_counter() - start < 1
    assert "allowed" in str(info.value)
    with pytest.raises(ScreenshotError, match="100000 x 100000"):
        open_screenshot(bomb)


def test_pillow_limit_still_gives_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """When Pillow's own, stricter limit trips, the caller still gets a ScreenshotError."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(ScreenshotError):
        open_screenshot(png_claiming(64, 64, b"\0" * (64 * 193)))


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.9])
def test_truncated_png_is_refused(fraction: float) -> None:
    """A screenshot cut short inside its image data is a ScreenshotError, not a partial image."""
    screenshot = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    cut = screenshot[: int(len(screenshot) * fraction)]
    with pytest.raises(ScreenshotError, match="cannot be decoded"):
        tag_screenshot(cut, SMALL_TREE)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a PNG"),
        (b"GIF89a" + b"\0" * 40, "not a PNG"),
        (b"\xff\xd8\xff\xe0" + b"\0" * 40, "not a PNG"),
        (b"<desktop-frame/>", "not a PNG"),
        (PNG_SIGNATURE, "no IHDR"),
        (PNG_SIGNATURE + b"\0\0\0\x0dIHDX" + b"\0" * 20, "no IHDR"),
        (png_claiming(0, 10), "empty image"),
        (png_claiming(4, 4)[:29] + b"\xde\xad\xbe\xef" + png_claiming(4, 4)[33:], "corrupt"),
        (
            PNG_SIGNATURE
            + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + png_chunk(b"IDAT", b"this is not zlib data")
            + png_chunk(b"IEND", b""),
            "cannot be decoded",
        ),
        (
            PNG_SIGNATURE
            + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + png_chunk(b"zTXt", b"k\0\0" + zlib.compress(b"\0" * 20_000_000))
            + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + png_chunk(b"IEND", b""),
            "too large",
        ),
    ],
)
def test_bad_screenshot_bytes_are_refused(data: bytes, message: str) -> None:
    """Non-PNG bytes, broken headers, bad CRCs, bad data and text-chunk bombs are ScreenshotErrors."""
    with pytest.raises(ScreenshotError, match=message):
        tag_screenshot(data, SMALL_TREE)


@pytest.mark.parametrize("value", ["\x89PNG not bytes", None, 42])
def test_screenshot_must_be_bytes(value: object) -> None:
    """A screenshot that is not bytes is a ScreenshotError naming its type."""
    with pytest.raises(ScreenshotError, match="PNG bytes"):
        tag_screenshot(value, SMALL_TREE)  # type: ignore[arg-type]
