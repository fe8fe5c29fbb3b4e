"""Observation.from_dict: what each observation type needs, and clear errors when it is missing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from osharm_core import (
    AccessibilityTreeError,
    Observation,
    ObservationError,
    ScreenshotError,
    linearize_accessibility_tree,
)
from osharm_core.observation import PNG_SIGNATURE, png_size
from tests.conftest import OBSERVATIONS, png_claiming

PNG = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
XML = (OBSERVATIONS / "mousepad_notes.xml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("kind", "has_png", "has_xml"),
    [
        ("screenshot", True, False),
        ("a11y_tree", False, True),
        ("screenshot_a11y_tree", True, True),
        ("som", True, True),
    ],
)
def test_takes_what_each_type_needs(kind: str, has_png: bool, has_xml: bool) -> None:
    """Each observation type keeps exactly the inputs it uses."""
    obs = Observation.from_dict({"screenshot": PNG, "accessibility_tree": XML}, kind)  # type: ignore[arg-type]
    assert (obs.screenshot is not None) == has_png
    assert (obs.accessibility_tree is not None) == has_xml


@pytest.mark.parametrize("kind", ["screenshot", "screenshot_a11y_tree", "som"])
def test_missing_screenshot_names_key_and_type(kind: str) -> None:
    """A missing screenshot is a ScreenshotError that names the key and the observation type."""
    with pytest.raises(ScreenshotError, match=rf"'{kind}'.*'screenshot'.*no such key"):
        Observation.from_dict({"accessibility_tree": XML}, kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["a11y_tree", "screenshot_a11y_tree", "som"])
def test_missing_tree_names_key_and_type(kind: str) -> None:
    """A tree set to None is an AccessibilityTreeError that names the key and the type."""
    with pytest.raises(AccessibilityTreeError, match=r"'accessibility_tree'.*set to None"):
        Observation.from_dict({"screenshot": PNG, "accessibility_tree": None}, kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not bytes", "must be PNG bytes"),
        (b"GIF89a" + b"\0" * 40, "not a PNG"),
        (PNG_SIGNATURE, "truncated"),
        (png_claiming(0, 10), "empty image"),
    ],
)
def test_bad_screenshot_is_refused(value: object, message: str) -> None:
    """Wrong types, wrong signatures and cut-off headers are refused before any decoding."""
    with pytest.raises(ScreenshotError, match=message):
        Observation.from_dict({"screenshot": value}, "screenshot")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "must be an XML string"),
        ("   ", "empty"),
        (b"<a>\xff</a>", "not valid utf-8"),
        (b"\xff\xfe<a/", "not valid utf-16"),
    ],
)
def test_bad_tree_is_refused(value: object, message: str) -> None:
    """A tree that is not text, is blank, or is not valid in its encoding is refused with the
    key named."""
    with pytest.raises(AccessibilityTreeError, match=message):
        Observation.from_dict({"accessibility_tree": value}, "a11y_tree")


def test_tree_bytes_are_decoded() -> None:
    """A tree given as UTF-8 bytes is accepted as text."""
    obs = Observation.from_dict({"accessibility_tree": XML.encode()}, "a11y_tree")
    assert obs.accessibility_tree == XML


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-8-sig", "latin-1"])
def test_tree_bytes_decode_as_the_parser_reads_them(codec: str) -> None:
    """Bytes in any encoding the parser reads (a BOM, a wide "<?", a declaration) are the same
    text to `from_dict`, and the step linearizes them as `linearize_accessibility_tree` does."""
    declared = f'<?xml version="1.0" encoding="{codec.removesuffix("-sig")}"?>' + XML
    data = declared.encode(codec)
    if codec == "utf-16-be":
        assert not data.startswith(b"\xfe\xff")  # no BOM: found by the wide "<?"
    obs = Observation.from_dict({"accessibility_tree": data}, "a11y_tree")
    assert obs.accessibility_tree == declared
    assert linearize_accessibility_tree(obs.accessibility_tree) == linearize_accessibility_tree(
        data
    )


def test_unknown_type_and_non_mapping() -> None:
    """An unknown observation type or a non-mapping observation is an ObservationError."""
    with pytest.raises(ObservationError, match="unknown observation type"):
        Observation.from_dict({}, "video")  # type: ignore[arg-type]
    with pytest.raises(ObservationError, match="mapping"):
        Observation.from_dict([], "screenshot")  # type: ignore[arg-type]


def test_errors_are_value_errors() -> None:
    """Callers that catch ValueError, as with the reference agent, still catch these errors."""
    with pytest.raises(ValueError):  # noqa: PT011
        Observation.from_dict({}, "screenshot")


def test_huge_claimed_size_is_read_without_decoding() -> None:
    """The header of a PNG claiming 100k x 100k pixels is read without allocating anything."""
    assert png_size(png_claiming(100_000, 100_000)) == (100_000, 100_000)
    assert Observation(screenshot=PNG).screenshot_size == (1920, 1080)


def test_repr_hides_payloads() -> None:
    """The repr shows sizes, not megabytes of bytes and XML."""
    text = repr(Observation(screenshot=PNG, accessibility_tree=XML))
    assert len(text) < 120


def test_without_a_type_takes_what_is_there() -> None:
    """With no observation type, the present keys are checked and kept; neither is an error."""
    assert Observation.from_dict({"screenshot": PNG}).accessibility_tree is None
    both = Observation.from_dict({"screenshot": PNG, "accessibility_tree": XML})
    assert both.screenshot == PNG
    assert both.accessibility_tree == XML
    with pytest.raises(ObservationError, match="neither"):
        Observation.from_dict({"terminal": "ls"})
    with pytest.raises(ScreenshotError, match="not a PNG"):
        Observation.from_dict({"screenshot": b"GIF89a" + b"\0" * 40, "accessibility_tree": XML})


@given(st.binary(max_size=64))
def test_a_buffer_is_copied_so_its_owner_cannot_change_the_observation(data: bytes) -> None:
    """An Observation of a bytearray or memoryview holds immutable bytes equal to it then."""
    for make in (bytearray, lambda b: memoryview(bytearray(b))):
        buffer = make(data)
        observation = Observation(screenshot=buffer, accessibility_tree=buffer)
        for index in range(len(buffer)):
            buffer[index] ^= 0xFF
        assert type(observation.screenshot) is bytes
        assert observation.screenshot == observation.accessibility_tree == data
        same = Observation(screenshot=data, accessibility_tree=data)  # type: ignore[arg-type]
        assert hash(observation) == hash(same)


def test_a_released_buffer_is_an_observation_error() -> None:
    """A memoryview released before it is handed over is refused by type, not a raw ValueError."""
    view = memoryview(PNG)
    view.release()
    with pytest.raises(ObservationError, match="cannot be read"):
        Observation(screenshot=view)


def test_a_released_buffer_in_an_observation_dict_names_its_key() -> None:
    """A released buffer under either key is refused by type, with the key named."""
    screenshot, tree = memoryview(PNG), memoryview(XML.encode())
    screenshot.release()
    tree.release()
    with pytest.raises(ScreenshotError, match=r"key 'screenshot' .*cannot be read"):
        Observation.from_dict({"screenshot": screenshot, "accessibility_tree": XML})
    with pytest.raises(AccessibilityTreeError, match=r"key 'accessibility_tree' .*cannot be read"):
        Observation.from_dict({"screenshot": PNG, "accessibility_tree": tree})
