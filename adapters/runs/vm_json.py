"""JSON request bodies for an OSWorld VM's server, written as plain ASCII.

httpx's `json=` writes text as UTF-8, which cannot hold a lone surrogate: a
model's reply can carry one (the JSON escape `\\ud800` in its code) and so can a
task file (a file name read with Python's `surrogateescape`), and encoding it
raised a raw `UnicodeEncodeError` before anything was sent. Here every
character outside ASCII, a lone surrogate included, goes as a `\\uXXXX` escape,
as OSWorld's own controller sends its bodies (`json.dumps` with its defaults);
the server's Flask (`request.json`) reads the escapes back into the same text.
"""

from __future__ import annotations

import json
from typing import Any

#: The content type every JSON body is sent with.
JSON_CONTENT_TYPE = "application/json"


def json_body(value: object) -> dict[str, Any]:
    """httpx request keywords (`content`, `headers`) sending `value` as ASCII JSON.

    >>> json_body({"command": ["echo", "caf\\udce9"]})["content"]
    b'{"command": ["echo", "caf\\\\udce9"]}'
    """
    text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    return {"content": text.encode("ascii"), "headers": {"content-type": JSON_CONTENT_TYPE}}


__all__ = ["JSON_CONTENT_TYPE", "json_body"]
