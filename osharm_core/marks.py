"""Set-of-marks: number the kept elements on the screenshot and list them in a table.

By default the decisions are exactly the reference's on ubuntu trees: the same nodes
(the accessibility filter with the image rule), the same integer reading of their
geometry, the same single-colour test on the image as it is being drawn, the same
drawing with Pillow's built-in default font. Windows trees are read with the
windows namespaces (the reference tags none of their nodes). A screenshot in a mode
the marks would not show on (palette, bilevel, 16-bit grey) is first converted to
RGB, RGBA or L, as scaling converts it; RGB, RGBA, L and LA are drawn on as given.
"""

from __future__ import annotations

import functools
import io
import math
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs
from PIL import Image, ImageChops, ImageColor, ImageDraw, ImageFont, UnidentifiedImageError

from osharm_core.accessibility import (
    filter_nodes,
    parse_accessibility_tree,
    platform_keys,
    text_cell,
)
from osharm_core.config import Platform
from osharm_core.errors import (
    ConfigError,
    ScreenshotError,
    check_flag,
    check_size,
    number_excerpt,
)
from osharm_core.observation import png_size
from osharm_core.state import Mask

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ELEMENT_TABLE_HEADER",
    "SetOfMarks",
    "encode_png",
    "open_screenshot",
    "resample_screenshot",
    "single_colour",
    "tag_screenshot",
]

#: The largest screenshot (width times height) decoded unless the caller allows more.
DEFAULT_MAX_PIXELS: Final = 8192 * 8192
#: The first line of every element table.
ELEMENT_TABLE_HEADER: Final = "index\ttag\tname\ttext"

# Drawing coordinates beyond the image by more than this are pulled in: what lands
# on the image stays the same, and Pillow misdraws and crawls near 2**31.
_DRAW_MARGIN: Final = 256


@attrs.frozen
class SetOfMarks:
    """A tagged screenshot: the marks `(x, y, w, h)`, the PNG bytes, the element table.

    Unpacks as `masks, png, table = tag_screenshot(...)`; the attributes are
    precisely typed, the unpacked values are not.
    """

    masks: tuple[Mask, ...]
    tagged_screenshot: bytes
    element_table: str

    def __iter__(self) -> Iterator[Any]:
        """Yield masks, tagged screenshot and element table, in that order."""
        return iter((self.masks, self.tagged_screenshot, self.element_table))


def _checked_header(data: object, max_pixels: int) -> bytes:
    """The PNG bytes, once the signature and the header's pixel count are acceptable."""
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
        raise ConfigError(f"max_pixels must be a positive int; got {number_excerpt(max_pixels)}")
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ScreenshotError(f"screenshot must be PNG bytes, not {type(data).__name__}")
    data = bytes(data)
    width, height = png_size(data)
    if width * height > max_pixels:
        raise ScreenshotError(
            f"screenshot PNG claims {width} x {height} = {width * height} pixels, "
            f"more than the {max_pixels} allowed"
        )
    return data


def _checked_size(size: object, max_pixels: int) -> tuple[int, int] | None:
    """`size` as a `(width, height)` pair of ints >= 1 of at most `max_pixels` pixels (or `None`),
    else a `ConfigError` quoting it."""
    if size is None:
        return None
    width, height = check_size("size", size)
    if width * height > max_pixels:
        raise ConfigError(
            f"size {number_excerpt(width)} x {number_excerpt(height)} is more than the "
            f"{max_pixels} pixels max_pixels allows"
        )
    return width, height


def open_screenshot(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Decode a PNG screenshot, refusing non-PNG bytes, oversized headers and truncated data.

    The pixel count in the header is checked before any pixel is decoded, whatever
    Pillow's global `MAX_IMAGE_PIXELS` says. Every refusal is a `ScreenshotError`.
    """
    return _decoded(_checked_header(data, max_pixels))


# What Pillow raises on pixel data it cannot decode, convert or encode.
_PILLOW_ERRORS: Final = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)


def _decoded(data: bytes) -> Image.Image:
    """Decode PNG bytes whose header `_checked_header` has accepted."""
    try:
        image = Image.open(io.BytesIO(data), formats=("PNG",))
        image.load()
    except UnidentifiedImageError:
        raise ScreenshotError(
            "screenshot PNG cannot be decoded: its header chunks are corrupt (bad CRC or layout)"
        ) from None
    except _PILLOW_ERRORS as exc:
        raise ScreenshotError(f"screenshot PNG cannot be decoded: {exc}") from None
    key = image.info.get("transparency")
    depth, colour_type = data[24:26] if len(data) > 25 else (8, 0)
    if image.mode == "L" and colour_type == 0 and depth in (2, 4) and isinstance(key, int):
        # Pillow widens 2- and 4-bit grey to 8 bits but leaves the tRNS key at its raw depth.
        image.info["transparency"] = key * (255 // (2**depth - 1))
    return image


# Integer grey modes (16-bit PNG grey decodes to "I;16"): converting them clips at 255.
_WIDE_GREY: Final = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})


def _key_alpha(image: Image.Image, key: int) -> Image.Image:
    """An "L" alpha mask of an integer grey image: 0 where the pixel equals `key`, 255 elsewhere."""
    key_bytes = Image.new(image.mode, (1, 1), key).tobytes()
    view = _byte_view(image)
    return _any_band(
        ImageChops.difference(view, Image.new(view.mode, image.size, tuple(key_bytes)))
    )


def _resamplable(image: Image.Image) -> Image.Image:
    """The screenshot as "L", "RGB" or "RGBA", the modes LANCZOS resamples and PNG keeps faithfully.

    A transparent colour (tRNS) becomes an alpha channel (RGBA), integer grey is
    scaled from 16 to 8 bits (L), any other mode goes to RGB, or RGBA if it has alpha;
    no conversion used warns.
    """
    transparency = image.info.get("transparency")
    if image.mode in _WIDE_GREY:
        grey = image.point(lambda value: value / 257).convert("L")
        if not isinstance(transparency, int):
            return grey
        return Image.merge("RGBA", (grey, grey, grey, _key_alpha(image, transparency)))
    if transparency is None and image.mode in ("L", "RGB", "RGBA"):
        return image
    converted = image.convert("RGBA" if "A" in image.mode or transparency is not None else "RGB")
    converted.info.pop("transparency", None)
    return converted


def resample_screenshot(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """The decoded screenshot resampled to `size` (LANCZOS) as L, RGB or RGBA (see `_resamplable`).

    A conversion Pillow refuses raises `ScreenshotError`.
    """
    try:
        return _resamplable(image).resize(size, Image.Resampling.LANCZOS)
    except _PILLOW_ERRORS as exc:
        raise ScreenshotError(
            f"screenshot ({image.mode}, {image.width} x {image.height}) cannot be resampled: {exc}"
        ) from None


def encode_png(image: Image.Image, **params: Any) -> bytes:
    """The image as PNG bytes; an image Pillow cannot write raises `ScreenshotError`."""
    buffer = io.BytesIO()
    try:
        image.save(buffer, format="PNG", **params)
    except _PILLOW_ERRORS as exc:
        raise ScreenshotError(
            f"screenshot ({image.mode}, {image.width} x {image.height}) cannot be encoded as PNG: {exc}"
        ) from None
    return buffer.getvalue()


def _is_zero(pixel: Any) -> bool:
    return not any(pixel) if isinstance(pixel, tuple) else pixel == 0


def single_colour(image: Image.Image, box: tuple[int, int, int, int]) -> bool:
    """Whether `image.crop(box)` holds a single colour, without building that crop.

    Pillow fills the part of a crop outside the image with zeros; so does this
    test. It samples a few pixels first and only reads the whole (clipped) area
    when they all agree; no allocation exceeds the image itself. The pixels are
    read through a fresh `load()`, so they are the live ones even after drawing.
    """
    return _single_colour(image, box, _crop_is_one_colour)


def _single_colour(
    image: Image.Image,
    box: tuple[int, int, int, int],
    whole: Callable[[Image.Image, tuple[int, int, int, int]], bool],
) -> bool:
    """`single_colour`, with `whole` judging the clipped area once the samples agree."""
    pixels: Any = image.load()
    width, height = image.size
    x0, y0, x1, y1 = box
    left, top, right, bottom = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
    if left >= right or top >= bottom:
        return True
    first = pixels[left, top]
    if (x0 < 0 or y0 < 0 or x1 > width or y1 > height) and not _is_zero(first):
        return False
    if (
        pixels[right - 1, top] != first
        or pixels[left, bottom - 1] != first
        or pixels[right - 1, bottom - 1] != first
        or pixels[(left + right) // 2, (top + bottom) // 2] != first
    ):
        return False
    return whole(image, (left, top, right, bottom))


def _crop_is_one_colour(image: Image.Image, box: tuple[int, int, int, int]) -> bool:
    extrema: Any = image.crop(box).getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(low == high for low, high in bands)


# Modes whose raw bytes are a fixed number per pixel (and equal exactly when the pixels
# are equal), so they can be compared as 8-bit bands.
_BYTE_MODES: Final = frozenset(
    {"L", "LA", "P", "RGB", "RGBA", "I", "I;16", "I;16B", "I;16L", "I;16N"}
)
_BANDS_FOR_BYTES: Final = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_NONZERO: Final = [0] + [255] * 255


def _byte_view(image: Image.Image) -> Image.Image:
    """The image as 8-bit bands whose pixels are equal exactly where the image's are."""
    if image.mode == "1":
        return image.convert("L")
    if image.mode in ("L", "LA", "RGB", "RGBA"):
        return image
    raw = image.tobytes()
    per_pixel = len(raw) // max(1, image.width * image.height)
    return Image.frombytes(_BANDS_FOR_BYTES[per_pixel], image.size, raw)


def _any_band(image: Image.Image) -> Image.Image:
    """An "L" mask: 255 where any band of `image` is nonzero, 0 elsewhere."""
    bands = image.split()
    mask = bands[0]
    for band in bands[1:]:
        mask = ImageChops.lighter(mask, band)
    return mask.point(_NONZERO)


class _Uniformity:
    """Answers "is this area of the image one colour" in time nearly independent of its area.

    It keeps masks (255 where a pixel differs from its left neighbour, its upper
    one, either) and a mask of the 16 x 16 tiles holding any such pixel, built on
    first use; `refresh` recomputes them where the image was drawn on since. An
    area is one colour when its first row and first column are and no pixel of
    the rest of it differs from its left or upper neighbour. Small areas, and modes it cannot compare bytewise, are
    cropped and read as `single_colour` reads them.
    """

    _TILE: Final = 16
    _SMALL: Final = 16384
    _BAND_ROWS: Final = 256
    _BUILD_AFTER: Final = 4
    # Costs in pixels a plain crop reads in the same time: recomputing one drawn region, and
    # rebuilding the masks (per pixel of the image).
    _PER_REGION: Final = 50_000
    _REBUILD: Final = 5

    def __init__(self, image: Image.Image) -> None:
        self._image = image
        self._edges: Image.Image | None = None
        self._left: Image.Image | None = None
        self._upper: Image.Image | None = None
        self._tiles: Image.Image | None = None
        # Areas drawn on since the masks were last brought up to date (see `refresh`).
        self._pending: list[tuple[float, float, float, float]] = []
        # Pixels read by plain crops so far: the masks cost a few reads of the whole image to
        # build, so they are built only once crops would have read more than that.
        self._read = 0
        # Pixels read by plain crops since the masks were last brought up to date.
        self._cropped = 0

    def whole(self, image: Image.Image, box: tuple[int, int, int, int]) -> bool:
        """Whether the area `box` (inside the image) is one colour; the `whole` of `_single_colour`."""
        left, top, right, bottom = box
        area = (right - left) * (bottom - top)
        if area <= self._SMALL or image.mode not in _BYTE_MODES | {"1"}:
            return _crop_is_one_colour(image, box)
        width, height = self._image.size
        if self._edges is None:
            if self._read + area <= self._BUILD_AFTER * width * height:
                self._read += area
                return _crop_is_one_colour(image, box)
            self._build()
        elif self._pending:
            # Bringing the masks up to date costs a fixed amount per drawn region (or one
            # rebuild, when cheaper): plain crops answer until they have cost as much, so a
            # run of small areas never pays more than twice what crops alone would.
            rebuild = self._REBUILD * width * height
            catch_up = len(self._pending) * self._PER_REGION
            if self._cropped + area <= min(catch_up, rebuild):
                self._cropped += area
                return _crop_is_one_colour(image, box)
            self._cropped = 0
            if catch_up > rebuild:
                self._pending = []
                self._build()
            else:
                self._catch_up()
        assert self._left is not None
        assert self._upper is not None
        if self._left.crop((left + 1, top, right, top + 1)).getbbox() is not None:
            return False
        if self._upper.crop((left, top + 1, left + 1, bottom)).getbbox() is not None:
            return False
        return not self._any_edge(left + 1, top + 1, right, bottom)

    def refresh(self, regions: list[tuple[float, float, float, float]]) -> None:
        """Note `regions`, where pixels may have changed since the masks were built: they are
        recomputed there when a large area is next asked about (most calls draw thousands of
        marks and ask about a few large areas)."""
        if self._edges is not None:
            self._pending.extend(regions)

    def _catch_up(self) -> None:
        """Recompute the masks over every region drawn on since they were last up to date."""
        width, height = self._image.size
        pending, self._pending = self._pending, []
        for x0, y0, x1, y1 in pending:
            # A pixel's edge value also depends on its left and upper neighbours.
            left, top = max(math.floor(x0), 0), max(math.floor(y0), 0)
            right, bottom = min(math.ceil(x1) + 1, width), min(math.ceil(y1) + 1, height)
            if left < right and top < bottom:
                self._update((left, top, right, bottom))

    def _build(self) -> None:
        width, height = self._image.size
        tile = self._TILE
        self._edges = Image.new("L", (width, height))
        self._left = Image.new("L", (width, height))
        self._upper = Image.new("L", (width, height))
        self._tiles = Image.new("L", (-(-width // tile), -(-height // tile)))
        for top in range(0, height, self._BAND_ROWS):
            self._update((0, top, width, min(top + self._BAND_ROWS, height)))

    def _update(self, area: tuple[int, int, int, int]) -> None:
        assert self._edges is not None
        assert self._left is not None
        assert self._upper is not None
        assert self._tiles is not None
        left, top, right, bottom = area
        width, height = right - left, bottom - top
        # Row 0 and column 0 compare with Pillow's zero fill; no query reads them.
        view = _byte_view(self._image.crop((left - 1, top - 1, right, bottom)))
        here = view.crop((1, 1, width + 1, height + 1))
        left_edges = _any_band(ImageChops.difference(here, view.crop((0, 1, width, height + 1))))
        upper_edges = _any_band(ImageChops.difference(here, view.crop((1, 0, width + 1, height))))
        self._left.paste(left_edges, (left, top))
        self._upper.paste(upper_edges, (left, top))
        self._edges.paste(ImageChops.lighter(left_edges, upper_edges), (left, top))
        tile = self._TILE
        tl, tt = left // tile, top // tile
        tr, tb = -(-right // tile), -(-bottom // tile)
        block = self._edges.crop((tl * tile, tt * tile, tr * tile, tb * tile))
        self._tiles.paste(block.reduce(4).point(_NONZERO).reduce(4).point(_NONZERO), (tl, tt))

    def _any_edge(self, x0: int, y0: int, x1: int, y1: int) -> bool:
        edges, tiles = self._edges, self._tiles
        assert edges is not None
        assert tiles is not None
        tile = self._TILE
        i0, j0, i1, j1 = -(-x0 // tile), -(-y0 // tile), x1 // tile, y1 // tile
        if i0 >= i1 or j0 >= j1:
            return edges.crop((x0, y0, x1, y1)).getbbox() is not None
        if tiles.crop((i0, j0, i1, j1)).getbbox() is not None:
            return True
        strips = (
            (x0, y0, x1, j0 * tile),
            (x0, j1 * tile, x1, y1),
            (x0, j0 * tile, i0 * tile, j1 * tile),
            (i1 * tile, j0 * tile, x1, j1 * tile),
        )
        return any(
            edges.crop(strip).getbbox() is not None
            for strip in strips
            if strip[0] < strip[2] and strip[1] < strip[3]
        )


@functools.cache
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default()


def _reference_ints(text: str | None) -> tuple[int, int] | None:
    """Read geometry the reference's way: strip parentheses, split on ", ", int() each part."""
    if not text:
        return None
    try:
        parts = tuple(int(part) for part in text.strip("()").split(", "))
    except ValueError:
        return None
    return (parts[0], parts[1]) if len(parts) == 2 else None


# Image modes whose drawing never touches a palette, so a finished label can be
# copied in as pixels.
_STAMP_MODES: Final = frozenset({"RGB", "RGBA", "L", "LA"})
_STAMP_PAD: Final = 8


def _draw_label(draw: ImageDraw.ImageDraw, anchor: tuple[int, int], label: str) -> None:
    font = _font()
    box = draw.textbbox(anchor, label, font=font, anchor="lb")
    draw.rectangle(box, fill="black")
    draw.text(anchor, label, font=font, anchor="lb", fill="white")


@functools.lru_cache(maxsize=4096)
def _label_stamp(label: str, mode: str) -> tuple[int, int, Image.Image] | None:
    """A finished label (black box, white number) as pixels, with its offset from the anchor.

    Inside its box the label does not depend on what was beneath (the box is
    filled before the number is drawn on it); it is used as a stamp only when
    drawing it on a dark canvas left every pixel outside the box untouched, so
    pasting it gives exactly the pixels drawing would. `None` otherwise.
    """
    if mode not in _STAMP_MODES:
        return None
    probe = ImageDraw.Draw(Image.new(mode, (1, 1)))
    bbox = probe.textbbox((0, 0), label, font=_font(), anchor="lb")
    if any(v != int(v) for v in bbox):
        return None
    left, top, right, bottom = (int(v) for v in bbox)
    size = (right - left + 1 + 2 * _STAMP_PAD, bottom - top + 1 + 2 * _STAMP_PAD)
    inside = (_STAMP_PAD, _STAMP_PAD, size[0] - _STAMP_PAD, size[1] - _STAMP_PAD)
    blank = Image.new(mode, size, ImageColor.getcolor("#0a141e", mode))
    canvas = blank.copy()
    _draw_label(ImageDraw.Draw(canvas), (_STAMP_PAD - left, _STAMP_PAD - top), label)
    outside = ImageChops.difference(canvas, blank)
    outside.paste(0, inside)
    if outside.getbbox() is not None:
        return None
    return left, top, canvas.crop(inside)


# Modes the marks' red, black and white are drawn on as themselves (L and LA as greys).
_DRAWABLE: Final = frozenset({"RGB", "RGBA", "L", "LA"})


def _drawable(image: Image.Image) -> Image.Image:
    """The screenshot in a mode the marks show on, as scaling converts it (`_resamplable`).

    A palette image may have no free entry for red (Pillow refuses the outline, so every
    mark would be dropped), 16-bit grey takes the marks as values of at most 255 out of
    65535 (invisible), and bilevel turns red white; the reference draws on them as they are.
    """
    try:
        return _resamplable(image)
    except _PILLOW_ERRORS as exc:
        raise ScreenshotError(
            f"screenshot ({image.mode}, {image.width} x {image.height}) cannot be converted "
            f"to draw marks on: {exc}"
        ) from None


def _draw_mark(
    image: Image.Image,
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    label: str,
    touched: list[tuple[float, float, float, float]],
) -> None:
    """The reference's mark: a red outline, then the number on black at the bottom-left corner.

    Adds to `touched`, before drawing each part, areas holding every pixel it may change.
    """
    x, y, right, bottom = box
    right = min(right, image.size[0] + _DRAW_MARGIN)
    bottom = min(bottom, image.size[1] + _DRAW_MARGIN)
    pad = 2
    touched.extend(
        [
            (x - pad, y - pad, right + pad, y + pad),
            (x - pad, bottom - pad, right + pad, bottom + pad),
            (x - pad, y - pad, x + pad, bottom + pad),
            (right - pad, y - pad, right + pad, bottom + pad),
        ]
    )
    draw.rectangle([(x, y), (right, bottom)], outline="red", width=1)
    stamp = _label_stamp(label, image.mode)
    if stamp is None:
        x0, y0, x1, y1 = draw.textbbox((x, bottom), label, font=_font(), anchor="lb")
        touched.append((x0 - _STAMP_PAD, y0 - _STAMP_PAD, x1 + _STAMP_PAD, y1 + _STAMP_PAD))
        _draw_label(draw, (x, bottom), label)
    else:
        left, top, pixels = stamp
        x, y = x + left, bottom + top
        touched.append((x - pad, y - pad, x + pixels.width + pad, y + pixels.height + pad))
        image.paste(pixels, (x, y))


def tag_screenshot(
    screenshot: bytes,
    xml: str | bytes,
    platform: Platform = "ubuntu",
    *,
    test_original: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    size: tuple[int, int] | None = None,
) -> SetOfMarks:
    """Draw a numbered box on the screenshot for every kept element, from 1, in document order.

    With `size`, the screenshot is first resampled to that size (LANCZOS) and the
    boxes and labels are drawn on it at the scaled positions, so labels keep
    their legible size; masks stay in screen pixels, as the tree gives them.

    An element whose area is a single colour is skipped (by default judged on the
    image as drawn so far, like the reference; on the untouched screenshot with
    `test_original=True`). Raises `ScreenshotError` for a bad PNG,
    `AccessibilityTreeError` for a bad tree, and `ConfigError` for a `size` that is not
    a pair of ints >= 1 or holds more than `max_pixels` pixels.
    """
    keys = platform_keys(platform)
    check_flag("test_original", test_original)
    png = _checked_header(screenshot, max_pixels)
    target = _checked_size(size, max_pixels)
    nodes = filter_nodes(parse_accessibility_tree(xml), platform, check_image=True)
    image = _decoded(png)
    sx = sy = 1.0
    if target is not None and target != image.size:
        sx, sy = target[0] / image.size[0], target[1] / image.size[1]
        image = resample_screenshot(image, target)
    elif image.mode not in _DRAWABLE:
        image = _drawable(image)
    probe = image.copy() if test_original else image
    uniformity = _Uniformity(probe)
    draw = ImageDraw.Draw(image)
    masks: list[Mask] = []
    rows = [ELEMENT_TABLE_HEADER]
    for node in nodes:
        position = _reference_ints(node.get(keys.screencoord))
        size = _reference_ints(node.get(keys.size))
        if position is None or size is None:
            continue
        (x, y), (w, h) = position, size
        if w <= 0 or h <= 0:
            continue
        box = (x, y, x + w, y + h)
        if (sx, sy) != (1.0, 1.0):
            box = (round(x * sx), round(y * sy), round((x + w) * sx), round((y + h) * sy))
        if _single_colour(probe, box, uniformity.whole):
            continue
        index = len(masks) + 1
        touched: list[tuple[float, float, float, float]] = []
        try:
            _draw_mark(image, draw, box, str(index), touched)
        except ValueError:
            continue  # the reference skips a node whose drawing Pillow refuses
        finally:
            if probe is image:
                uniformity.refresh(touched)
        masks.append((x, y, w, h))
        rows.append(f"{index}\t{node.tag!s}\t{node.get('name', '')}\t{text_cell(node, keys)}")
    return SetOfMarks(tuple(masks), encode_png(image), "\n".join(rows))
