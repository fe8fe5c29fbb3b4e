"""Request bodies: `json_body` gives exactly the bytes httpx makes for `json=`, and the client sends them."""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.contract import HttpCall, ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.jsonbody import json_body
from adapters.providers.openai_chat import OpenAIChatProvider
from osharm_core import ImagePart, Message, TextPart
from tests.strategies import request_bodies


def _httpx_json(value: Any) -> bytes:
    return httpx.Request("POST", "http://127.0.0.1/", json=value).content


@settings(max_examples=300)
@given(request_bodies())
def test_the_bytes_are_those_httpx_makes(value: object) -> None:
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert json_body(value) == expected.encode("utf-8")
    if value is not None:  # httpx sends no body for json=None
        assert json_body(value) == _httpx_json(value)


def test_a_screenshot_is_copied_in_and_escapes_still_happen() -> None:
    shot = "data:image/png;base64," + "iVBORw0KGgo=" * 500
    body = {"messages": [{"content": [{"type": "text", "text": 'say "hi"\n✓'}, shot, shot]}]}
    assert json_body(body) == _httpx_json(body)
    quoted = "a" * 2000 + '"' + "\\" + "\x7f\x1f"
    assert json_body([quoted]) == _httpx_json([quoted])


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"x": math.nan, "image": "A" * 5000}, ValueError),
        ({"x": object(), "image": "A" * 5000}, TypeError),
        ({"image": "A" * 5000, "bad": {1, 2}}, TypeError),
    ],
)
def test_what_json_refuses_is_refused_the_same_way(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        json.dumps(value, allow_nan=False)
    with pytest.raises(error):
        json_body(value)


def test_a_circular_body_is_the_standard_error() -> None:
    looped: list[object] = ["A" * 5000]
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        json_body(looped)


class _NoContentType:
    """A provider whose calls carry no content-type header."""

    def __init__(self, inner: OpenAIChatProvider) -> None:
        self._inner = inner

    def encode(self, request: ModelRequest) -> HttpCall:
        call = self._inner.encode(request)
        headers = {k: v for k, v in call.headers.items() if k != "content-type"}
        return attrs.evolve(call, headers=headers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("content_type", [True, False])
def test_the_client_sends_the_request_httpx_json_makes(content_type: bool) -> None:
    """Body, headers and their order are those of `json=`, for a prompt with screenshots
    (a provider naming no content type gets httpx's, after the length, as with `json=`)."""
    request = ModelRequest(
        model="gpt-4o",
        messages=(
            Message("system", (TextPart("sys"),)),
            Message("user", (TextPart("look ✓"), ImagePart("iVBORw0KGgo" * 1000))),
        ),
    )
    seen: list[httpx.Request] = []

    def answer(sent: httpx.Request) -> httpx.Response:
        seen.append(sent)
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    chat = OpenAIChatProvider(base_url="http://127.0.0.1:9/v1", api_key="sk-test-key")
    provider: Any = chat if content_type else _NoContentType(chat)
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        assert HttpModelClient(provider, http_client=http).complete(request).text == "ok"
        call = provider.encode(request)
        headers = {"accept-encoding": "gzip, deflate", **call.headers}
        expected = http.build_request("POST", call.url, headers=headers, json=call.json)
    assert seen[0].content == expected.content
    assert list(seen[0].headers.raw) == list(expected.headers.raw)


@settings(max_examples=200)
@given(
    st.lists(st.text(alphabet=st.characters(), max_size=40), max_size=4),
    st.sampled_from(["", "QUJD" * 400]),
)
def test_lone_surrogates_are_written_as_json_escapes(texts: list[str], screenshot: str) -> None:
    """UTF-8 cannot hold a lone surrogate (httpx raises on one): it goes as its `\\uXXXX`
    escape, the body is valid UTF-8 and reads back as the same value; other text is as httpx
    writes it."""
    value = {"texts": texts, "image": screenshot, "k\udce9": "\\\ud800"}
    body = json_body(value)
    assert json.loads(body.decode("utf-8")) == value
    assert b'"k\\udce9":"\\\\\\ud800"' in body
    plain = {"texts": [t.encode("utf-8", "replace").decode() for t in texts], "image": screenshot}
    assert json_body(plain) == _httpx_json(plain)
