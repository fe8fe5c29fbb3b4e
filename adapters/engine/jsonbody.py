"""Request bodies as JSON bytes, without re-escaping the screenshots they carry.

`json_body(value)` is byte for byte what httpx sends for `json=value`
(`json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`
in UTF-8), and raises what that raises, except on a lone surrogate (a model's
reply can hold one, from the JSON escape `\\ud800`, and it comes back in the
history): UTF-8 cannot hold it and httpx raises `UnicodeEncodeError`; here it
is written as that JSON escape, so the call is made (and the provider says what
it thinks of it). A prompt's body is mostly base64
screenshots (four of them, ~270 kB, with the default history of three
turns), and the standard encoder scans and copies every character of them on
every call, which was most of the CPU an HTTP call took. A long ASCII string
that JSON writes as it is (no quote, backslash or control character: base64
never holds one) is checked with one C-speed pass and copied in as bytes; the
rest of the body goes through `json.dumps` as usual.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: Strings at least this long are checked for the fast path; shorter ones are not worth it.
LONG_STRING: Final = 1024

# Bytes JSON writes unescaped: printable ASCII (and DEL) but the quote and the backslash.
_PLAIN: Final = bytes(b for b in range(0x20, 0x80) if b not in b'"\\')
# Stands in for a long string while the rest of the body is encoded: control characters
# make its JSON form (quotes included) one that no other value can produce.
_MARK: Final = "\x00osharm-long-string\x00"
_MARK_JSON: Final = json.dumps(_MARK)


def _plain_bytes(text: str) -> bytes | None:
    """`text` as ASCII bytes when JSON writes it unescaped, else `None`."""
    if not text.isascii():
        return None
    raw = text.encode("ascii")
    return None if raw.translate(None, _PLAIN) else raw


def _swap(value: Any, found: list[bytes]) -> Any:
    """`value` with each long plain string replaced by `_MARK` (kept, in order, in `found`)."""
    kind = type(value)
    if kind is str:
        if len(value) >= LONG_STRING:
            raw = _plain_bytes(value)
            if raw is not None:
                found.append(raw)
                return _MARK
        return value
    if kind is dict:
        return {key: _swap(item, found) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_swap(item, found) for item in value]
    return value


#: How text is encoded: as UTF-8, with a lone surrogate (always inside a JSON string) as its
#: `\uXXXX` escape, which is also JSON's.
_UTF8: Final = ("utf-8", "backslashreplace")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_body(value: Any) -> bytes:
    """`value` as the compact UTF-8 JSON httpx sends for `json=value`, byte for byte.

    >>> value = {"a": [1, 2.5, None, "é"], "image": "data:image/png;base64," + "QUJD" * 300}
    >>> json_body(value)[:22], json_body(value)[-9:]
    (b'{"a":[1,2.5,null,"\\xc3\\xa9"]', b'UJDQUJD"}')
    """
    found: list[bytes] = []
    try:
        swapped = _swap(value, found)
    except RecursionError:  # too deep (or circular): the standard encoder says what is wrong
        found = []
    if not found:
        return _dumps(value).encode(*_UTF8)
    pieces = _dumps(swapped).split(_MARK_JSON)
    if len(pieces) != len(found) + 1:  # the body itself held the marker: take no chances
        return _dumps(value).encode(*_UTF8)
    out = [pieces[0].encode(*_UTF8)]
    for raw, piece in zip(found, pieces[1:], strict=True):
        out += (b'"', raw, b'"', piece.encode(*_UTF8))
    return b"".join(out)


__all__ = ["LONG_STRING", "json_body"]
