"""JSON read as strictly as the records are written: no `NaN`, `Infinity` or `1e999`.

Python's reader takes those (they are not JSON), and a value holding one
breaks later at a strict writer, far from where it came in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Final

from osharm_core.errors import excerpt


class _NotFinite(ValueError):
    """A number JSON cannot carry (`NaN`, `Infinity`, `1e999`); its text is the argument."""

    @property
    def reason(self) -> str:
        """What readers say of it: `it holds 'NaN', not a finite number`."""
        return f"it holds {excerpt(self.args[0])}, not a finite number"


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotFinite(text)
    return number


def _refused(text: str) -> float:
    raise _NotFinite(text)


#: A decoder as strict as `strict_loads`, for a reader that takes a document one value at a
#: time (`STRICT_DECODER.raw_decode(text, index)`).
STRICT_DECODER: Final = json.JSONDecoder(parse_constant=_refused, parse_float=_finite)


def strict_loads(
    data: str | bytes, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> Any:
    """`json.loads(data)`, refusing non-finite numbers with `_NotFinite` (a `ValueError`);
    `object_pairs_hook` as `json.loads` takes it.

    >>> strict_loads('{"x": 1.5}')
    {'x': 1.5}
    >>> strict_loads('[NaN]')
    Traceback (most recent call last):
    adapters._strict_json._NotFinite: NaN
    """
    return json.loads(
        data, parse_constant=_refused, parse_float=_finite, object_pairs_hook=object_pairs_hook
    )


__all__ = ["STRICT_DECODER", "strict_loads"]
