"""Servers' request limits against a real HTTP server on 127.0.0.1: typed errors, budgets that fit.

A server behind nginx answers 413 to bodies over 1 MiB; vLLM with default
settings refuses more than one image. Both errors are typed, never retried,
and say which `server_profile` to set; with that profile set the agent runs
the fixture episode without a single refusal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.agent import PromptAgent
from adapters.contract import ModelRequest
from adapters.engine.retry import RetryPolicy
from adapters.errors import ServerLimitError
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from osharm_core import AgentConfig, Message, TextPart
from tests.adapters.helpers import MODES, call, loopback_client, png_part
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion
from tests.conftest import BUDGET_EPISODE, fixture_observation

pytestmark = pytest.mark.usefixtures("instant_retries")

MIB = 1024 * 1024
EPISODE = BUDGET_EPISODE
REPLY = "```python\npyautogui.click(10, 20)\n```"


def nginx(received: Received) -> Reply:
    """nginx's default: bodies over 1 MiB get its HTML 413 page; others a completion."""
    if len(received.body) > MIB:
        return Reply(413, "<html><center><h1>413 Request Entity Too Large</h1></center></html>")
    return Reply(200, chat_completion(REPLY))


@pytest.fixture
def nginx_server() -> Iterator[LoopbackServer]:
    """A loopback server of its own that refuses bodies over 1 MiB, as nginx does."""
    with LoopbackServer() as server:
        server.route("POST", r"/v1/chat/completions", nginx)
        yield server


@pytest.mark.parametrize("mode", MODES)
def test_413_is_a_typed_error_naming_the_profile_and_is_not_retried(
    server: LoopbackServer, mode: str
) -> None:
    """HTTP 413 raises ServerLimitError(limit=max_bytes) after one try, naming server_profile='nginx'."""
    server.enqueue(Reply(413, "<html>413 Request Entity Too Large</html>"))
    client = loopback_client(
        "compat/m", f"{server.base_url}/v1", retry=RetryPolicy(retry_bad_request=True)
    )
    request = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))
    with pytest.raises(ServerLimitError, match="server_profile='nginx'") as caught:
        call(client, request, mode)
    assert caught.value.limit == "max_bytes"
    assert caught.value.status == 413
    assert caught.value.tries == 1
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "message",
    [
        "At most 1 image(s) may be provided in one request.",
        "You set image=1 (or defaulted to 1) in `--limit-mm-per-prompt`, but passed 2 image items",
    ],
)
def test_an_image_limit_reply_is_a_typed_error_naming_vllm_default(
    server: LoopbackServer, message: str
) -> None:
    """vLLM's 400 about images raises ServerLimitError(max_images, 1) at once, not a retried 400."""
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    server.enqueue(Reply(400, body))
    client = loopback_client(
        "vllm/qwen", f"{server.base_url}/v1", retry=RetryPolicy(retry_bad_request=True)
    )
    messages = (Message("user", (TextPart("a"), png_part(8, 8), png_part(8, 8))),)
    with pytest.raises(ServerLimitError, match="server_profile='vllm-default'") as caught:
        call(client, ModelRequest(model="vllm/qwen", messages=messages), "sync")
    assert (caught.value.limit, caught.value.maximum, caught.value.tries) == ("max_images", 1, 1)


def test_an_image_limit_too_long_to_read_is_still_typed(server: LoopbackServer) -> None:
    """A limit of 5,000 digits (past int()'s 4,300) is a ServerLimitError with no maximum,
    never a raw ValueError."""
    text = "At most " + "9" * 5000 + " image(s) may be provided in one request."
    server.enqueue(Reply(400, {"object": "error", "message": text, "code": 400}))
    client = loopback_client("vllm/qwen", f"{server.base_url}/v1")
    request = ModelRequest(model="vllm/qwen", messages=(Message("user", (TextPart("a"),)),))
    with pytest.raises(ServerLimitError, match="fewer images") as caught:
        call(client, request, "sync")
    assert (caught.value.limit, caught.value.maximum, caught.value.tries) == ("max_images", None, 1)


CLOUDFLARE_413 = (
    "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 "
    "Request Entity Too Large</h1></center><hr><center>cloudflare</center></body></html>"
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "body",
    [
        CLOUDFLARE_413,
        {
            "type": "error",
            "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"},
        },
    ],
)
def test_anthropic_413_is_a_server_limit_naming_its_profile(
    server: LoopbackServer, mode: str, body: object
) -> None:
    """Anthropic's 413 (its 32 MB body limit) raises ServerLimitError(max_bytes) naming
    server_profile='anthropic', after one request: the history is never silently dropped
    (it was a ContextLengthError, re-sent shortened)."""
    server.enqueue(Reply(413, body))
    client = loopback_client("claude-sonnet-4-5", server.base_url)
    messages = (
        Message("system", (TextPart("sys"),)),
        Message("user", (TextPart("old"),)),
        Message("assistant", (TextPart("reply"),)),
        Message("user", (TextPart("new"),)),
    )
    request = ModelRequest(model="claude-sonnet-4-5", messages=messages)
    with pytest.raises(ServerLimitError, match="server_profile='anthropic'") as caught:
        call(client, request, mode)
    assert (caught.value.limit, caught.value.status, caught.value.tries) == ("max_bytes", 413, 1)
    assert "nginx" not in str(caught.value)
    (sent,) = server.requests
    assert len(sent.json()["messages"]) == 3


def test_a_413_for_the_tokens_per_minute_is_not_about_bytes(server: LoopbackServer) -> None:
    """Groq's 413 `rate_limit_exceeded` (one request above the account's tokens per minute) is
    a ServerLimitError(max_input_tokens) with the limit it names, not the nginx byte hint;
    it is not retried, since no wait lets a request over the per-minute limit through."""
    message = (
        "Request too large for model `llama-3.3-70b-versatile` in organization `org_x` service "
        "tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 14137, please "
        "reduce your message size and try again."
    )
    body = {"error": {"message": message, "type": "tokens", "code": "rate_limit_exceeded"}}
    server.enqueue(Reply(413, body))
    client = loopback_client("groq/llama-3.3-70b-versatile", f"{server.base_url}/v1")
    request = ModelRequest(model="groq/llama", messages=(Message("user", (TextPart("a"),)),))
    with pytest.raises(ServerLimitError, match="tokens-per-minute") as caught:
        call(client, request, "sync")
    assert (caught.value.limit, caught.value.maximum) == ("max_input_tokens", 12000)
    assert "nginx" not in str(caught.value)
    assert len(server.requests) == 1


def run_episode(agent: PromptAgent) -> None:
    """The five fixture observations, one predict each."""
    for name in EPISODE:
        agent.predict("Tidy up the desktop.", fixture_observation(name))


def test_without_a_profile_nginx_refuses_the_fourth_step(nginx_server: LoopbackServer) -> None:
    """Today's default sends step 4 (three turns of history) over 1 MiB and gets a 413."""
    client = loopback_client("compat/m", f"{nginx_server.base_url}/v1")
    config = AgentConfig(model="compat/m", action_space="pyautogui")
    agent = PromptAgent.from_config(config, client=client)
    with client, pytest.raises(ServerLimitError, match="nginx"):
        run_episode(agent)
    assert len(agent.state) == 3


def test_with_the_nginx_profile_every_request_stays_under_one_mebibyte(
    nginx_server: LoopbackServer, tmp_path: Path
) -> None:
    """server_profile="nginx": five steps, no 413, every body under 1 MiB, the cut recorded."""
    client = loopback_client("compat/m", f"{nginx_server.base_url}/v1")
    config = AgentConfig(model="compat/m", action_space="pyautogui", server_profile="nginx")
    recorder = TrajectoryRecorder(tmp_path)
    agent = PromptAgent.from_config(config, client=client, recorder=recorder)
    with client:
        run_episode(agent)
    sizes = [len(r.body) for r in nginx_server.requests]
    assert len(sizes) == len(EPISODE)
    assert max(sizes) <= MIB
    entries = read_trajectory(tmp_path)
    cut = [e for e in entries if e.degradation is not None]
    assert [e.step for e in cut] == [4]
    assert cut[0].degradation is not None
    assert cut[0].degradation.dropped_images == (1,)
    assert cut[0].degradation.before.bytes > MIB >= cut[0].degradation.after.bytes
    line = (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert "degradation" not in json.loads(line)
    assert agent.state.observations[3].degradation == cut[0].degradation
