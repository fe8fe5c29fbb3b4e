"""Neutral messages and the OpenAI chat wire shape."""

from __future__ import annotations

from osharm_core import ImagePart, Message, TextPart, render_openai_chat


def test_chat_shape() -> None:
    """Text parts render as text and images as image_url with a PNG data URL and detail high."""
    messages = [Message("user", (TextPart("look"), ImagePart("QUJD")))]
    assert render_openai_chat(messages, "gpt-4o") == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,QUJD", "detail": "high"},
                },
            ],
        }
    ]


def test_responses_shape_for_computer_use_preview() -> None:
    """computer-use-preview (bare or prefixed) gets input_text and input_image parts."""
    messages = [Message("user", (TextPart("look"), ImagePart("QUJD")))]
    for model in ("computer-use-preview", "openai/computer-use-preview-2025-03-11"):
        assert render_openai_chat(messages, model)[0]["content"] == [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,QUJD", "detail": "high"},
        ]


def test_messages_are_values() -> None:
    """Equal content means equal messages, and they hash, so they can be cached and compared."""
    a = Message("assistant", (TextPart("ok"),))
    assert a == Message("assistant", (TextPart("ok"),))
    assert hash(a) == hash(Message("assistant", (TextPart("ok"),)))
