"""Every hypothesis strategy of the test suite, in one place.

Sections are grouped by the concern they feed; add new strategies to the
section of the module they exercise.
"""

from __future__ import annotations

from hypothesis import strategies as st

# --- text -----------------------------------------------------------------

#: Any text, including control characters, surrogate-free odd Unicode and fences.
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.text(
    alphabet="`'\";\n\t #\\abcDONEWAITFAILpyautogui().,=", max_size=200
)


# --- model providers and computer-use actions (tests/adapters/test_anthropic.py, ...) ---

from osharm_core import ImagePart, Message, TextPart  # noqa: E402  (kept inside this section)

_PNG_1x1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
_JPEG_HEAD = "/9j/4AAQSkZJRgABAQAAAQABAAD"

_provider_parts = st.one_of(
    st.builds(TextPart, st.sampled_from(["", " ", "\n"]) | st.text(max_size=30)),
    st.builds(ImagePart, st.sampled_from([_PNG_1x1, _JPEG_HEAD])),
)


@st.composite
def provider_messages(draw: st.DrawFn) -> tuple[Message, ...]:
    """Conversations of any shape: optional system, any role order, empty and image parts."""
    roles = st.sampled_from(["system", "user", "assistant"])
    return tuple(
        Message(draw(roles), tuple(draw(st.lists(_provider_parts, max_size=4))))
        for _ in range(draw(st.integers(0, 7)))
    )


_coordinate = st.integers(0, 1919) | st.floats(0, 1079, allow_nan=False)
_point = st.fixed_dictionaries({"x": _coordinate, "y": _coordinate})
_cua_key = st.sampled_from(
    ["CTRL", "ALT", "SHIFT", "ENTER", "ESC", "SPACE", "TAB", "BACKSPACE", "DELETE", "ARROWLEFT",
     "ARROWRIGHT", "ARROWUP", "ARROWDOWN", "CMD", "SUPER", "META", "PAGEUP", "PAGEDOWN", "HOME",
     "END", "F5", "a", "A", "z", "1", "/", "-", "+", "ctrl", "Enter"]
)  # fmt: skip


def _cua(kind: str, **fields: st.SearchStrategy[object]) -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries({"type": st.just(kind), **fields})


#: Every well-formed computer-use-preview action (the shapes the Responses API documents).
cua_actions = st.one_of(
    _cua(
        "click",
        x=_coordinate,
        y=_coordinate,
        button=st.sampled_from(["left", "right", "wheel", "middle", "back", "forward"]),
    ),
    _cua("double_click", x=_coordinate, y=_coordinate),
    _cua("move", x=_coordinate, y=_coordinate),
    _cua("drag", path=st.lists(_point, min_size=1, max_size=5)),
    _cua("keypress", keys=st.lists(_cua_key, min_size=1, max_size=4)),
    _cua(
        "scroll",
        x=_coordinate,
        y=_coordinate,
        scroll_x=st.integers(-2000, 2000),
        scroll_y=st.integers(-2000, 2000),
    ),
    _cua("type", text=any_text),
    _cua("wait"),
    _cua("screenshot"),
)

_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)

#: Anything a model might put in a computer_call's `action` slot, well-formed or not.
cua_anything = cua_actions | st.dictionaries(
    st.sampled_from(["type", "x", "y", "button", "keys", "path", "text", "scroll_x", "scroll_y"]),
    st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3), max_leaves=5)
    | st.sampled_from(["click", "drag", "keypress", "scroll", "type", "zoom"]),
    max_size=6,
)
