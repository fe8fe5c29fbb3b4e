"""Loopback routes speaking the three native computer-use protocols, checking what the real APIs check.

Each simulator answers from a script of model turns and rejects, with the
vendor's own error shape, what the documentation says the API rejects: a
missing key or beta header, a tool of the wrong shape, a chain that does not
answer every pending call with a screenshot, a safety check continued
without acknowledgement. Routes live under `/native` so they never meet the
other provider routes on the shared session server.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.adapters.loopback import LoopbackServer, Received, Reply
from tests.adapters.provider_routes import (
    ResponseChain,
    anthropic_error,
    gemini_error,
    responses_error,
)

PREFIX = "/native"
OPENAI_PATH = PREFIX + r"/v1/responses"
ANTHROPIC_PATH = PREFIX + r"/v1/messages"
GEMINI_PATH = PREFIX + r"/v1beta/models/[^/:]+:generateContent"

_BETAS = {
    "computer_20251124": "computer-use-2025-11-24",
    "computer_20250124": "computer-use-2025-01-24",
}
_TOOLSET = "computer_toolset_20260801"
#: Models the Claude API serves computer use to only through the toolset (Claude 5.5).
_TOOLSET_ONLY = ("claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")
_PNG = "iVBORw0KGgo"


@dataclass(frozen=True)
class Stopped:
    """A scripted model turn that ends with the given stop reason instead of the natural one.

    OpenAI's reason becomes an `incomplete` response with that
    `incomplete_details.reason`; Anthropic's is the `stop_reason`, Gemini's
    the `finishReason`.
    """

    turn: Any
    reason: str


def _unwrap(turn: Any, natural: str) -> tuple[Any, str]:
    return (turn.turn, turn.reason) if isinstance(turn, Stopped) else (turn, natural)


class _Scripted:
    """A queue of scripted model turns and the request bodies received, shared by the simulators."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turns: deque[Any] = deque()
        self.bodies: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Forget scripted turns and received bodies."""
        with self.lock:
            self.turns.clear()
            self.bodies.clear()
            self._forget()

    def _forget(self) -> None:
        """Forget protocol state (stored responses)."""

    def script(self, *turns: Any) -> None:
        """Queue the next model turns, in order."""
        with self.lock:
            self.turns.extend(turns)

    def next_turn(self, default: Any) -> Any:
        return self.turns.popleft() if self.turns else default


class OpenAIComputerSimulator(_Scripted):
    """`POST /v1/responses` with the GA `computer` tool: stored responses, chaining, safety checks."""

    def __init__(self) -> None:
        super().__init__()
        self._chain = ResponseChain("data:image/png;base64," + _PNG)

    def _forget(self) -> None:
        self._chain.forget()

    def __call__(self, received: Received) -> Reply:
        """Check the request as the Responses API does, then answer with the next scripted output."""
        if not received.headers.get("authorization", "").startswith("Bearer "):
            return responses_error(401, "You didn't provide an API key.")
        body = received.json()
        if body.get("tools") != [{"type": "computer"}]:
            return responses_error(400, "the computer tool is declared as {'type': 'computer'}")
        with self.lock:
            self.bodies.append(body)
            problem = self._chain.problem(body)
            if problem is not None:
                return responses_error(400, problem)
            message = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "All done."}],
            }
            output, reason = _unwrap(self.next_turn([message]), "completed")
            response_id = self._chain.store(output)
        reply = {
            "id": response_id,
            "object": "response",
            "status": "completed" if reason == "completed" else "incomplete",
            "model": body["model"],
            "output": output,
            "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110},
        }
        if reason != "completed":
            reply["incomplete_details"] = {"reason": reason}
        return Reply(200, reply)


class AnthropicComputerSimulator(_Scripted):
    """`POST /v1/messages` with the computer tool: the GA toolset (no beta header, member
    tool_use blocks whose results echo `toolset_name`) or a beta tool (its header), each
    tool_use answered by its own tool_result; Claude 5.5 refuses the beta tools."""

    def __call__(self, received: Received) -> Reply:
        """Check the request as the Messages API does, then answer with the next scripted content."""
        headers = received.headers
        if not headers.get("x-api-key"):
            return anthropic_error(401, "authentication_error", "x-api-key header is required")
        body = received.json()
        problem = self._check(body, headers)
        if problem is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        with self.lock:
            self.bodies.append(body)
            content, stop = _unwrap(
                self.next_turn([{"type": "text", "text": "The task is complete."}]), ""
            )
            number = len(self.bodies)
        if not stop:
            stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        reply = {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": 50, "output_tokens": 5},
        }
        return Reply(200, reply)

    def _check(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        tools = body.get("tools", [])
        if len(tools) != 1:
            return "tools: exactly the computer tool is expected"
        problem = (
            _toolset_problem(tools[0], headers)
            if tools[0].get("type") == _TOOLSET
            else _beta_problem(tools[0], headers, body.get("model"))
        )
        return problem or _turns_problem(body.get("messages", []))


def _toolset_problem(tool: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    if set(tool) - {"type", "configs", "cache_control"}:
        return "tools.0: a toolset entry carries only type, configs and cache_control"
    if "computer-use" in headers.get("anthropic-beta", ""):
        return f"{_TOOLSET} is generally available and takes no computer-use beta header"
    return None


def _beta_problem(tool: Mapping[str, Any], headers: Mapping[str, str], model: object) -> str | None:
    if tool.get("name") != "computer":
        return "tools: exactly the computer tool is expected"
    if tool.get("type") not in _BETAS:
        return f"tools.0.type: unknown tool version {tool.get('type')!r}"
    if model in _TOOLSET_ONLY:
        return f"{model} does not support {tool['type']}; use {_TOOLSET}"
    if headers.get("anthropic-beta") != _BETAS[tool["type"]]:
        return f"{tool['type']} needs the anthropic-beta header {_BETAS[tool['type']]}"
    if not all(
        isinstance(tool.get(f), int) and tool[f] > 0
        for f in ("display_width_px", "display_height_px")
    ):
        return "tools.0: display_width_px and display_height_px are required"
    if "enable_zoom" in tool and tool["type"] != "computer_20251124":
        return "enable_zoom is only accepted by computer_20251124"
    return None


def _turns_problem(turns: list[dict[str, Any]]) -> str | None:
    if not turns or turns[0]["role"] != "user":
        return "first message must use the user role"
    for before, after in itertools.pairwise(turns):
        if before["role"] == after["role"]:
            return "roles must alternate"
    for turn in turns:
        for block in turn["content"]:
            if block["type"] == "text" and not block["text"].strip():
                return "text content blocks must contain non-whitespace text"
    for index, turn in enumerate(turns):
        uses = [
            (b["id"], b.get("toolset_name"))
            for b in turn["content"]
            if turn["role"] == "assistant" and b["type"] == "tool_use"
        ]
        if not uses:
            continue
        if index + 1 >= len(turns):
            return "the last message cannot be an assistant turn with tool_use"
        answer = turns[index + 1]["content"]
        results = [b for b in answer if b["type"] == "tool_result"]
        given = [(b.get("tool_use_id"), b.get("toolset_name")) for b in answer[: len(uses)]]
        if given != uses or len(results) != len(uses):
            return (
                "each tool_use needs its own tool_result (echoing its toolset_name) "
                f"immediately after, in order: {uses}"
            )
    return None


class GeminiComputerSimulator(_Scripted):
    """`POST /v1beta/models/{model}:generateContent` with the computerUse tool: calls answered with screenshots."""

    def __call__(self, received: Received) -> Reply:
        """Check the request as Gemini does, then answer with the next scripted parts."""
        if "key=" in received.query:
            return gemini_error(400, "INVALID_ARGUMENT", "the key must not be in the URL")
        if not received.headers.get("x-goog-api-key"):
            return gemini_error(
                403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers"
            )
        body = received.json()
        problem = self._check(body)
        if problem is not None:
            return gemini_error(400, "INVALID_ARGUMENT", problem)
        with self.lock:
            self.bodies.append(body)
            parts, reason = _unwrap(self.next_turn([{"text": "I have finished the task."}]), "STOP")
            number = len(self.bodies)
        model = received.path.rsplit("/", 1)[-1].removesuffix(":generateContent")
        reply = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason}],
            "usageMetadata": {
                "promptTokenCount": 40,
                "candidatesTokenCount": 6,
                "totalTokenCount": 46,
            },
            "modelVersion": model,
            "responseId": f"gen_{number}",
        }
        return Reply(200, reply)

    def _check(self, body: Mapping[str, Any]) -> str | None:
        tools = body.get("tools", [])
        environment = (
            tools[0].get("computerUse", {}).get("environment") if len(tools) == 1 else None
        )
        if environment not in ("ENVIRONMENT_BROWSER", "ENVIRONMENT_DESKTOP"):
            return "tools: the computerUse tool with an environment is expected"
        contents = body.get("contents", [])
        for before, after in itertools.pairwise(contents):
            if before["role"] == after["role"]:
                return "roles must alternate"
        for index, turn in enumerate(contents):
            calls = [p["functionCall"]["name"] for p in turn["parts"] if "functionCall" in p]
            if turn["role"] != "model" or not calls:
                continue
            if index + 1 >= len(contents):
                return "a function call turn must be followed by the function responses"
            answers = [
                p["functionResponse"]
                for p in contents[index + 1]["parts"]
                if "functionResponse" in p
            ]
            if [a["name"] for a in answers] != calls:
                return "each function call needs its function response, in order"
            images = [p for a in answers for p in a.get("parts", [])]
            if not images or not images[-1]["inlineData"]["data"].startswith(_PNG):
                return "computer use function responses must carry the screenshot"
        return None


def install(
    server: LoopbackServer,
) -> tuple[OpenAIComputerSimulator, AnthropicComputerSimulator, GeminiComputerSimulator]:
    """Add the three native routes to `server` and return their simulators."""
    simulators = (
        OpenAIComputerSimulator(),
        AnthropicComputerSimulator(),
        GeminiComputerSimulator(),
    )
    server.route("POST", OPENAI_PATH, simulators[0])
    server.route("POST", ANTHROPIC_PATH, simulators[1])
    server.route("POST", GEMINI_PATH, simulators[2])
    return simulators
