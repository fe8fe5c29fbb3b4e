"""httpx's and httpcore's own DEBUG records never show a key a server echoes back."""

from __future__ import annotations

import logging

import pytest

from adapters.contract import ModelRequest
from adapters.engine.redaction import redacting
from osharm_core import Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion

REQUEST = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))


@pytest.mark.parametrize("mode", MODES)
def test_a_key_echoed_in_a_reply_header_is_redacted_from_httpcore_debug_logs(
    server: LoopbackServer, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """httpcore logs every reply's headers at DEBUG: a header echoing the key shows
    `[redacted]` there, and no httpx or httpcore record holds the key."""
    echo = {"x-echo": f"Bearer {FAKE_KEY}", "x-key": FAKE_KEY}
    server.enqueue(Reply(200, chat_completion("ok"), headers=echo))
    caplog.set_level(logging.DEBUG)
    client = loopback_client("compat/m", server.base_url + "/v1")
    assert call(client, REQUEST, mode).text == "ok"
    records = [r for r in caplog.records if r.name.split(".")[0] in ("httpx", "httpcore")]
    headers = [r.getMessage() for r in records if "receive_response_headers.complete" in r.msg]
    assert len(headers) == 1
    assert "x-echo" in headers[0]
    assert "[redacted]" in headers[0]
    assert any(r.name == "httpx" and "HTTP Request: POST" in r.getMessage() for r in records)
    texts = [r.getMessage() for r in caplog.records] + [repr(r.__dict__) for r in caplog.records]
    assert all(FAKE_KEY not in text for text in texts)


def test_records_are_left_alone_when_no_call_carries_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The redaction holds only while a call carrying the secret runs: before and after, the
    loggers' records pass unchanged (nothing else is hidden)."""
    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("httpcore.http11")
    with redacting(("sk-during-the-call",)):
        log.debug("header %s", "sk-during-the-call")
    log.debug("header %s", "sk-during-the-call")
    assert [r.getMessage() for r in caplog.records] == [
        "header [redacted]",
        "header sk-during-the-call",
    ]
