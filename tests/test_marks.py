"""Set-of-marks: the reference's marks, table and pixels, with a fast exact single-colour test."""

from __future__ import annotations

import io
import time
import xml.etree.ElementTree as ET
from unittest import mock

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageFont

from osharm_core import marks
from osharm_core.errors import AccessibilityTreeError, ConfigError, ScreenshotError
from osharm_core.marks import ELEMENT_TABLE_HEADER, SetOfMarks, single_colour, tag_screenshot
from tests import strategies as s
from tests.conftest import fixture_observation
from tests.test_accessibility import UBUNTU, WINDOWS, reference_nodes, reference_text, tree

SHOWN = 'st:showing="true" st:visible="true" st:enabled="true"'


def png(image: Image.Image) -> bytes:
    """The image as PNG bytes, saved with Pillow's defaults."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pixels(image: Image.Image) -> list[object]:
    """Every pixel value of the image, row by row."""
    flat = getattr(image, "get_flattened_data", None)
    return list(flat() if flat is not None else image.getdata())


def reference_tag(
    screenshot: bytes, xml: str, platform: str = "ubuntu", test_original: bool = False
) -> tuple[list[tuple[int, int, int, int]], bytes, str]:
    """The reference's tagging, written out plainly: literal crops and a set of their pixels."""
    component = f"{{{UBUNTU if platform == 'ubuntu' else WINDOWS}component}}"
    image = Image.open(io.BytesIO(screenshot))
    probe = image.copy() if test_original else image
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    found, table, index = [], [ELEMENT_TABLE_HEADER], 1
    for node in reference_nodes(xml, platform, check_image=True):
        position, size = node.get(component + "screencoord"), node.get(component + "size")
        if not (position and size):
            continue
        try:
            x, y = (int(v) for v in position.strip("()").split(", "))
            w, h = (int(v) for v in size.strip("()").split(", "))
        except ValueError:
            continue
        if w <= 0 or h <= 0:
            continue
        if len(set(pixels(probe.crop((x, y, x + w, y + h))))) == 1:
            continue
        draw.rectangle([(x, y), (x + w, y + h)], outline="red", width=1)
        box = draw.textbbox((x, y + h), str(index), font=font, anchor="lb")
        draw.rectangle(box, fill="black")
        draw.text((x, y + h), str(index), font=font, anchor="lb", fill="white")
        found.append((x, y, w, h))
        table.append(
            f"{index}\t{node.tag}\t{node.get('name', '')}\t{reference_text(node, platform)}"
        )
        index += 1
    return found, png(image), "\n".join(table)


def fixture(name: str) -> tuple[bytes, str]:
    """A real observation's screenshot bytes and tree text."""
    obs = fixture_observation(name)
    return obs["screenshot"], obs["accessibility_tree"]


def speckled(size: tuple[int, int] = (64, 48), mode: str = "RGB") -> Image.Image:
    """A white image with a few black pixels, so most boxes are not a single colour."""
    image = Image.new("RGB", size, "white")
    for xy in [(1, 1), (30, 20), (50, 40), (10, 35), (60, 5)]:
        image.putpixel(xy, (0, 0, 0))
    return image if mode == "RGB" else image.convert(mode)


# --- against the reference ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "test_original"),
    [
        ("xfce4_terminal_shell", False),
        ("mousepad_notes", False),
        ("mousepad_notes", True),
        ("libreoffice_writer_checklist", False),
        ("libreoffice_writer_checklist", True),
    ],
)
def test_fixture_matches_reference(name: str, test_original: bool) -> None:
    """Masks, element table and PNG bytes equal the plainly written reference on real screens."""
    screenshot, xml = fixture(name)
    result = tag_screenshot(screenshot, xml, test_original=test_original)
    expected_masks, expected_png, expected_table = reference_tag(
        screenshot, xml, "ubuntu", test_original
    )
    assert list(result.masks) == expected_masks
    assert result.element_table == expected_table
    assert result.tagged_screenshot == expected_png
    assert len(result.masks) > 0


def test_drawn_image_option_changes_decisions_on_a_real_screen() -> None:
    """On the Writer screen the drawn-image test keeps more boxes than the untouched one."""
    screenshot, xml = fixture("libreoffice_writer_checklist")
    live = tag_screenshot(screenshot, xml)
    original = tag_screenshot(screenshot, xml, test_original=True)
    assert len(live.masks) > len(original.masks)
    assert set(original.masks) <= set(live.masks)


def test_earlier_box_keeps_a_later_one() -> None:
    """A box drawn earlier can make a later plain area non-uniform (default), unlike the original."""
    image = Image.new("RGB", (60, 60), "white")
    image.putpixel((2, 2), (0, 0, 0))
    xml = tree(
        f'<push-button name="a" {SHOWN} cp:screencoord="(0, 0)" cp:size="(20, 20)"/>'
        f'<push-button name="b" {SHOWN} cp:screencoord="(10, 10)" cp:size="(20, 20)"/>'
    )
    assert tag_screenshot(png(image), xml).masks == ((0, 0, 20, 20), (10, 10, 20, 20))
    assert tag_screenshot(png(image), xml, test_original=True).masks == ((0, 0, 20, 20),)
    for option in (False, True):
        ours = tag_screenshot(png(image), xml, test_original=option)
        assert ours.tagged_screenshot == reference_tag(png(image), xml, "ubuntu", option)[1]


SPECKLED_TREE = tree(
    "".join(
        f'<push-button name="n{i}" {SHOWN} cp:screencoord="({x}, {y})" cp:size="({w}, {h})"/>'
        for i, (x, y, w, h) in enumerate(
            [(0, 0, 20, 20), (25, 15, 30, 30), (40, 30, 40, 40), (5, 5, 3, 3), (58, 2, 10, 8)]
        )
    )
)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA"])
def test_image_modes_match_reference(mode: str) -> None:
    """The modes marks show on are tagged byte for byte like the reference."""
    image = speckled(mode=mode)
    ours = tag_screenshot(png(image), SPECKLED_TREE)
    masks, expected_png, table = reference_tag(png(image), SPECKLED_TREE)
    assert (list(ours.masks), ours.element_table) == (masks, table)
    assert ours.tagged_screenshot == expected_png


def wide_grey(image: Image.Image) -> Image.Image:
    """The image as 16-bit grey ("I;16") spanning the whole range: 8-bit value v is v * 257."""
    grey = image.convert("L")
    wide = Image.new("I;16", grey.size)
    wide.putdata([value * 257 for value in pixels(grey)])
    return wide


def with_transparent_white(image: Image.Image) -> Image.Image:
    """A palette copy of `image` whose white entry is transparent (a tRNS chunk)."""
    palette = image.convert("P")
    palette.info["transparency"] = palette.getpixel((0, 0))
    return palette


@pytest.mark.parametrize(
    ("screen", "as_drawn"),
    [
        (speckled(mode="P"), speckled(mode="P").convert("RGB")),
        (speckled(mode="1"), speckled(mode="1").convert("RGB")),
        (wide_grey(speckled()), speckled(mode="L")),
        (with_transparent_white(speckled()), with_transparent_white(speckled()).convert("RGBA")),
    ],
    ids=["P", "1", "I;16", "P with tRNS"],
)
def test_modes_marks_would_not_show_on_are_converted_first(
    screen: Image.Image, as_drawn: Image.Image
) -> None:
    """Palette, bilevel and 16-bit grey screenshots are tagged as the reference tags the same
    screen in RGB(A) or 8-bit grey (it draws on them as they are: a full palette refuses red,
    so no mark is drawn, and 16-bit grey gets its marks at values of at most 255 of 65535)."""
    ours = tag_screenshot(png(screen), SPECKLED_TREE)
    masks, expected_png, table = reference_tag(png(as_drawn), SPECKLED_TREE)
    assert (list(ours.masks), ours.element_table) == (masks, table)
    assert len(masks) == 4
    assert ours.tagged_screenshot == expected_png


def test_a_full_palette_without_red_gets_every_mark_in_red() -> None:
    """A 256-colour palette with no free entry and no red, black or white: every mark is
    drawn (the reference's outline in red is refused there, and each mark silently dropped)."""
    image = Image.new("P", (64, 48))
    image.putpalette(
        [c for i in range(256) for c in (10 + (i % 16) * 10, 20 + (i // 16) * 10, 100)]
    )
    image.putdata([(x * 7 + y * 13) % 256 for y in range(48) for x in range(64)])
    with pytest.raises(ValueError, match="cannot allocate more than 256 colors"):
        ImageDraw.Draw(image.copy()).rectangle([(0, 0), (5, 5)], outline="red")
    ours = tag_screenshot(png(image), SPECKLED_TREE)
    assert len(ours.masks) == 5
    tagged = Image.open(io.BytesIO(ours.tagged_screenshot))
    assert tagged.mode == "RGB"
    assert tagged.getpixel((0, 0)) == (255, 0, 0)
    assert ours == reference_tag_of(image.convert("RGB"))


def reference_tag_of(image: Image.Image) -> SetOfMarks:
    """The reference's tagging of `image` against the speckled tree, as a `SetOfMarks`."""
    masks, tagged, table = reference_tag(png(image), SPECKLED_TREE)
    return SetOfMarks(tuple(masks), tagged, table)


@pytest.mark.parametrize(
    ("position", "size", "tagged"),
    [
        ("(25, 15)", "(20, 20)", True),
        ("(2_5, 15)", "(20, 20)", True),
        ("(+25, 15)", "(20, 20)", True),
        ("(25.5, 15)", "(20, 20)", False),
        ("(25, 15)", "(20.0, 20)", False),
        ("(0x19, 15)", "(20, 20)", False),
        ("(25,15)", "(20, 20)", False),
        ("( 25 , 15 )", "(20, 20)", True),
    ],
)
def test_geometry_read_as_the_reference_reads_it(position: str, size: str, tagged: bool) -> None:
    """Tagging reads geometry with int() after stripping parentheses and splitting on ", "."""
    xml = tree(f'<push-button name="n" {SHOWN} cp:screencoord="{position}" cp:size="{size}"/>')
    screenshot = png(speckled())
    ours = tag_screenshot(screenshot, xml)
    assert (len(ours.masks) == 1) is tagged
    assert list(ours.masks) == reference_tag(screenshot, xml)[0]


def test_element_table_rows() -> None:
    """The table lists index, tag, raw name and the quoted text column of each drawn node."""
    xml = tree(
        f'<push-button name="a&#9;b" {SHOWN} cp:screencoord="(0, 0)" cp:size="(40, 40)">say "x"</push-button>'
        f'<image image="true" name="" {SHOWN} cp:screencoord="(20, 10)" cp:size="(40, 35)"/>'
        f'<panel name="not a role" {SHOWN} cp:screencoord="(0, 0)" cp:size="(40, 40)"/>'
    )
    result = tag_screenshot(png(speckled()), xml)
    assert result.element_table == (
        f'{ELEMENT_TABLE_HEADER}\n1\tpush-button\ta\tb\t"say ""x"""\n2\timage\t\t""'
    )


def test_windows_trees_use_windows_namespaces() -> None:
    """Windows trees are tagged through the windows namespaces, including the EditWrapper value."""
    xml = tree(
        '<textbox name="e" st:visible="true" st:enabled="true" cp:screencoord="(0, 0)" '
        'cp:size="(40, 40)" cls:class="EditWrapper" val:value="typed"/>'
        f'<push-button name="u" xmlns:ust="{UBUNTU}state" xmlns:ucp="{UBUNTU}component" '
        'ust:showing="true" ust:visible="true" ust:enabled="true" '
        'ucp:screencoord="(0, 0)" ucp:size="(40, 40)"/>',
        "windows",
    )
    result = tag_screenshot(png(speckled()), xml, "windows")
    assert result.masks == ((0, 0, 40, 40),)
    assert result.element_table.splitlines()[1] == "1\ttextbox\te\ttyped"
    assert tag_screenshot(png(speckled()), xml, "ubuntu").masks == ((0, 0, 40, 40),)
    assert list(result.masks) == reference_tag(png(speckled()), xml, "windows")[0]


def test_huge_boxes_are_fast_and_drawn_as_if_clipped() -> None:
    """Boxes 2**31 wide are tested and drawn in milliseconds, with the pixels of a clipped box."""
    screenshot = png(speckled())
    huge = tree(
        f'<push-button name="n" {SHOWN} cp:screencoord="(5, 5)" cp:size="(2147483647, 4294967296)"/>'
    )
    moderate = huge.replace("(2147483647, 4294967296)", "(400, 400)")
    start = time.perf_counter()
    result = tag_screenshot(screenshot, huge)
    assert time.perf_counter() - start < 2
    assert result.masks == ((5, 5, 2147483647, 4294967296),)
    assert result.tagged_screenshot == tag_screenshot(screenshot, moderate).tagged_screenshot
    assert result.tagged_screenshot == reference_tag(screenshot, moderate)[1]


def test_box_wholly_outside_is_skipped() -> None:
    """A box entirely off the image is an all-zero crop, hence one colour, hence skipped."""
    xml = tree(f'<push-button name="n" {SHOWN} cp:screencoord="(500, 500)" cp:size="(5, 5)"/>')
    assert tag_screenshot(png(speckled()), xml).masks == ()


# --- values and errors ----------------------------------------------------------------


def test_result_unpacks_in_reference_order() -> None:
    """SetOfMarks is frozen and unpacks as masks, tagged PNG, element table."""
    screenshot, xml = fixture("xfce4_terminal_shell")
    result = tag_screenshot(screenshot, xml)
    found, image, table = result
    assert (found, image, table) == (result.masks, result.tagged_screenshot, result.element_table)
    assert image.startswith(b"\x89PNG")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.masks = ()  # type: ignore[misc]
    assert isinstance(result, SetOfMarks)


def test_tree_errors_are_typed() -> None:
    """A malformed tree raises AccessibilityTreeError; an unknown platform ConfigError."""
    with pytest.raises(AccessibilityTreeError):
        tag_screenshot(png(speckled()), "<a>")
    with pytest.raises(ConfigError):
        tag_screenshot(png(speckled()), tree(""), "plan9")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -5, True, 2.5])
def test_max_pixels_must_be_positive(bad: object) -> None:
    """The pixel limit must be a positive int."""
    with pytest.raises(ValueError, match="max_pixels"):
        tag_screenshot(png(speckled()), tree(""), max_pixels=bad)  # type: ignore[arg-type]


def test_max_pixels_is_honoured() -> None:
    """A screenshot over the caller's pixel limit is refused before decoding."""
    with pytest.raises(ScreenshotError, match="3072 pixels"):
        tag_screenshot(png(speckled()), tree(""), max_pixels=3000)


# --- the single-colour test and the label stamps --------------------------------------------


@given(s.small_images(), s.small_boxes)
def test_single_colour_equals_literal_crop(
    image: Image.Image, box: tuple[int, int, int, int]
) -> None:
    """The fast test agrees with a literal crop and a set of its pixels, edges and outside included."""
    assert single_colour(image, box) == (len(set(pixels(image.crop(box)))) == 1)


def test_single_colour_on_gigantic_box_allocates_nothing_big() -> None:
    """A 2**40-pixel box is judged from the image alone: zero-filled outside, so black counts."""
    black, white = Image.new("RGB", (20, 20)), Image.new("RGB", (20, 20), "white")
    box = (0, 0, 2**40, 2**40)
    assert single_colour(black, box) is True
    assert single_colour(white, box) is False
    assert single_colour(white, (3, 3, 9, 9)) is True


@given(s.patchwork_images(), st.lists(s.patchwork_boxes, max_size=12), st.data())
def test_uniformity_index_equals_literal_crops_while_drawing(
    image: Image.Image, boxes: list[tuple[int, int, int, int]], data: st.DataObject
) -> None:
    """The index behind set-of-marks answers as a literal crop does, also after painting and refresh."""
    index = marks._Uniformity(image)
    values = list(pixels(image)) or [0]
    with (
        mock.patch.object(marks._Uniformity, "_SMALL", 0),
        mock.patch.object(marks._Uniformity, "_BUILD_AFTER", 0),
    ):
        for x, y, w, h in boxes:
            box = (x, y, x + w, y + h)
            assert marks._single_colour(image, box, index.whole) == single_colour(image, box)
            if data.draw(st.booleans()):
                image.paste(data.draw(st.sampled_from(values)), box)
                index.refresh([box])


@given(
    s.patchwork_images(("RGB", "RGBA", "L", "LA", "P", "1", "I;16")),
    st.lists(s.patchwork_boxes, max_size=15),
    st.booleans(),
    st.sampled_from([None, (35, 25), (90, 70)]),
)
def test_set_of_marks_with_the_index_equals_literal_crops(
    image: Image.Image,
    boxes: list[tuple[int, int, int, int]],
    test_original: bool,
    size: tuple[int, int] | None,
) -> None:
    """Marks, table and PNG are those of the literal crop test, drawn and original modes, scaled too."""
    xml = tree(
        "".join(
            f'<push-button name="n{i}" {SHOWN} cp:screencoord="({x}, {y})" cp:size="({w}, {h})"/>'
            for i, (x, y, w, h) in enumerate(boxes)
        )
    )
    with (
        mock.patch.object(marks._Uniformity, "_SMALL", 0),
        mock.patch.object(marks._Uniformity, "_BUILD_AFTER", 0),
    ):
        indexed = tag_screenshot(png(image), xml, test_original=test_original, size=size)
    with mock.patch.object(
        marks._Uniformity, "whole", lambda _self, im, box: single_colour(im, box)
    ):
        literal = tag_screenshot(png(image), xml, test_original=test_original, size=size)
    assert indexed == literal


@pytest.mark.parametrize("test_original", [False, True])
def test_many_large_one_colour_boxes_take_time_linear_in_the_tree(test_original: bool) -> None:
    """3,000 screen-sized boxes whose samples agree on a one-colour screen, with the marks of a
    plain crop per box (the time is a ratio benchmark: tests/benchmarks/test_bench_core.py)."""
    image = Image.new("RGB", (1920, 1080), (255, 0, 0))
    image.putpixel((1, 1), (0, 0, 255))
    xml = tree(
        "".join(
            f'<push-button name="b{i}" {SHOWN} cp:screencoord="({24 * (i % 70)}, 0)" '
            f'cp:size="({1920 - 24 * (i % 70)}, {1080 - 14 * ((i // 70) % 70)})"/>'
            for i in range(3000)
        )
    )
    result = tag_screenshot(png(image), xml, test_original=test_original)
    assert len(result.masks) == 43


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA"])
def test_label_stamps_equal_drawing(mode: str) -> None:
    """Pasting a cached label gives exactly the pixels of drawing it, at edges and corners too."""
    base = speckled((80, 60), "RGB").convert(mode)
    for label in ["1", "7", "42", "108", "999", "1234"]:
        for anchor in [(0, 0), (3, 59), (75, 30), (40, 70), (-5, 10)]:
            drawn, stamped = base.copy(), base.copy()
            marks._draw_label(ImageDraw.Draw(drawn), anchor, label)
            stamp = marks._label_stamp(label, mode)
            assert stamp is not None
            left, top, pixels = stamp
            stamped.paste(pixels, (anchor[0] + left, anchor[1] + top))
            assert stamped.tobytes() == drawn.tobytes(), (label, anchor)


def test_palette_images_are_drawn_not_stamped() -> None:
    """Palette images get no stamp (drawing adds palette entries), so they are drawn directly."""
    assert marks._label_stamp("1", "P") is None
    assert marks._label_stamp("1", "1") is None


def test_label_font_is_pillows_default_loaded_once() -> None:
    """The font is Pillow's built-in default, loaded a single time."""
    assert marks._font() is marks._font()
    default = ImageFont.load_default()
    assert marks._font().getbbox("123") == default.getbbox("123")


def test_reference_table_uses_raw_names() -> None:
    """Names go into the table as they are, control characters and quotes unescaped."""
    name = 'tab\there "quoted" \u202eRTL'
    element = ET.Element("push-button", {"name": name})
    body = ET.tostring(element, encoding="unicode").replace(
        "<push-button", f'<push-button {SHOWN} cp:screencoord="(0, 0)" cp:size="(40, 40)"'
    )
    result = tag_screenshot(png(speckled()), tree(body))
    assert result.element_table.split("\n")[1] == f'1\tpush-button\t{name}\t""'


@pytest.mark.parametrize("value", ["false", 0, 1, None])
def test_test_original_takes_only_booleans(value: object) -> None:
    """`test_original="false"` is refused, not read as true."""
    body = f'<push-button name="a" {SHOWN} cp:screencoord="(0, 0)" cp:size="(20, 20)"/>'
    with pytest.raises(ConfigError, match="test_original must be true or false"):
        tag_screenshot(png(speckled()), tree(body), test_original=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "size", [(0, 0), (-5, 10), (1.5, 2.5), ("64", "48"), (64,), (64, 48, 3), {}, (True, 48)]
)
def test_size_must_be_a_pair_of_positive_ints(size: object) -> None:
    """A `size` that is not a (width, height) pair of ints >= 1 is a ConfigError quoting it."""
    body = f'<push-button name="a" {SHOWN} cp:screencoord="(0, 0)" cp:size="(20, 20)"/>'
    with pytest.raises(ConfigError, match=r"size must be a \(width, height\) pair"):
        tag_screenshot(png(speckled()), tree(body), size=size)  # type: ignore[arg-type]


def test_size_beyond_max_pixels_is_refused_before_resampling() -> None:
    """A `size` of more pixels than `max_pixels` is refused at once, never drawn (40000 x 40000
    took a minute and 6 GB)."""
    body = f'<push-button name="a" {SHOWN} cp:screencoord="(0, 0)" cp:size="(20, 20)"/>'
    started = time.monotonic()
    with pytest.raises(ConfigError, match="more than the 67108864 pixels max_pixels allows"):
        tag_screenshot(png(speckled()), tree(body), size=(40000, 40000))
    with pytest.raises(ConfigError, match="max_pixels"):
        tag_screenshot(png(speckled()), tree(body), size=(100, 100), max_pixels=64 * 48)
    assert time.monotonic() - started < 5
    assert tag_screenshot(png(speckled()), tree(body), size=[32, 24]).masks == ((0, 0, 20, 20),)
