"""Provider-neutral chat messages and their OpenAI Chat Completions wire shape."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import attrs

Role = Literal["system", "user", "assistant"]


@attrs.frozen
class TextPart:
    """A piece of text inside a message."""

    text: str


@attrs.frozen
class ImagePart:
    """An image inside a message, kept base64-encoded so history never re-encodes it."""

    data: str
    media_type: str = "image/png"
    detail: str = "high"

    @property
    def data_url(self) -> str:
        """The image as a `data:` URL, the form OpenAI-style APIs take."""
        return f"data:{self.media_type};base64,{self.data}"


Part = TextPart | ImagePart


@attrs.frozen
class Message:
    """One chat message: a role and its parts, in order."""

    role: Role
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        """The text parts joined with newlines (images left out).

        >>> Message("user", (TextPart("a"), ImagePart("AAAA"), TextPart("b"))).text
        'a\\nb'
        """
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts, in order."""
        return tuple(p for p in self.parts if isinstance(p, ImagePart))


def uses_responses_parts(model: str) -> bool:
    """Whether `model` takes Responses-API part types (`input_text` / `input_image`).

    >>> uses_responses_parts("computer-use-preview-2025-03-11"), uses_responses_parts("gpt-4o")
    (True, False)
    """
    return model.rsplit("/", 1)[-1].startswith("computer-use-preview")


def _render_part(part: Part, responses: bool) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text" if responses else "text", "text": part.text}
    if responses:
        return {"type": "input_image", "image_url": part.data_url, "detail": part.detail}
    return {"type": "image_url", "image_url": {"url": part.data_url, "detail": part.detail}}


def render_openai_chat(messages: Iterable[Message], model: str) -> list[dict[str, Any]]:
    """The messages in the wire shape the reference PromptAgent builds.

    Every message is `{"role", "content": [parts]}`; text parts are
    `{"type": "text"}` and images `{"type": "image_url"}` with a base64 PNG data
    URL and detail `high`, except for `computer-use-preview`, whose parts are
    `input_text` and `input_image`.

    >>> render_openai_chat([Message("system", (TextPart("hi"),))], "gpt-4o")
    [{'role': 'system', 'content': [{'type': 'text', 'text': 'hi'}]}]
    """
    responses = uses_responses_parts(model)
    return [
        {"role": m.role, "content": [_render_part(p, responses) for p in m.parts]} for m in messages
    ]
