"""Thumbnails for a report's overview: a small JPEG of a screenshot, made with Pillow.

The screenshot is read bounded (a regular file, not a link, at most `MAX_IMAGE_BYTES`) and
decoded through `osharm_core.marks.open_screenshot`, which checks the PNG's header (its
pixel count below all) before any pixel is decoded: a decompression bomb is refused, not
decoded.
"""

from __future__ import annotations

import io
from typing import Final

from PIL import Image

from adapters._files import read_regular
from adapters.report.model import Picture, ReportError
from adapters.report.read import MAX_IMAGE_BYTES, MAX_PICTURE_PIXELS
from osharm_core.marks import open_screenshot, resample_screenshot

#: A thumbnail's width in pixels (its height keeps the screenshot's proportions).
THUMB_WIDTH: Final = 240
#: The tallest thumbnail (a very tall screenshot is cut to this).
THUMB_MAX_HEIGHT: Final = 400
#: JPEG quality: screenshots' text stays legible at this size, each a few kilobytes.
THUMB_QUALITY: Final = 70


def thumbnail_size(size: tuple[int, int]) -> tuple[int, int]:
    """The thumbnail's size for a picture of `size`.

    >>> thumbnail_size((1920, 1080))
    (240, 135)
    """
    width, height = size
    return THUMB_WIDTH, max(1, min(THUMB_MAX_HEIGHT, round(THUMB_WIDTH * height / width)))


def thumbnail(picture: Picture) -> bytes:
    """A JPEG thumbnail of `picture`; a `ScreenshotError` or `ReportError` when it cannot be
    read or decoded."""
    data = read_regular(
        picture.path, "screenshot", MAX_IMAGE_BYTES, ReportError, follow_links=False
    )
    image = open_screenshot(data, max_pixels=MAX_PICTURE_PIXELS)
    width, height = thumbnail_size(image.size)
    # A cheap shrink to about twice the size first (Pillow's reduce), then a good resample.
    factor = max(1, min(image.width // (2 * width), image.height // (2 * height)))
    if factor > 1 and image.mode in ("L", "RGB", "RGBA"):
        image = image.reduce(factor)
    small = resample_screenshot(image, (width, height))
    if small.mode != "RGB":
        backdrop = Image.new("RGB", small.size, "white")
        backdrop.paste(small.convert("RGBA"), mask=small.convert("RGBA").getchannel("A"))
        small = backdrop
    out = io.BytesIO()
    small.save(out, format="JPEG", quality=THUMB_QUALITY, optimize=True)
    return out.getvalue()


__all__ = ["THUMB_WIDTH", "thumbnail", "thumbnail_size"]
