"""Anthropic, Gemini and Responses routes for the loopback server, checking what the real APIs check.

Each simulator is installed on a `LoopbackServer` with `install(server)` and
answers like the provider would: it rejects what the documentation says the
API rejects (missing headers, a key in the URL, non-alternating roles, blank
text, both sampling parameters on a model that takes one, an unanswered
`computer_call`, an unacknowledged safety check) with the provider's own
error shape, and otherwise replies from a script or with a canned answer.
Scripted faults still go through the server's queue (`server.enqueue`).
The reply-body builders serve the providers' unit tests as well.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from tests.adapters.loopback import LoopbackServer, Received, Reply

ANTHROPIC_PATH = r"/v1/messages"
GEMINI_PATH = r"/v1beta/models/[^/:]+:generateContent"
RESPONSES_PATH = r"/v1/responses"


# --- reply bodies -------------------------------------------------------------


def anthropic_message(text: str, *, model: str = "claude-loopback") -> dict[str, Any]:
    """A Messages API reply with one text block."""
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 4},
    }


def anthropic_error_body(kind: str, message: str) -> dict[str, Any]:
    """A Messages API error body (`{"type": "error", "error": {...}}`) carrying a request id."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_body"}


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> Reply:
    """A Messages API error reply, with a request id in the body and in a header."""
    body = anthropic_error_body(kind, message)
    return Reply(status, body, headers={"request-id": f"req_{status}", **headers})


def gemini_reply(text: str, *, model: str = "gemini-loopback") -> dict[str, Any]:
    """A generateContent reply with one candidate."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 5, "totalTokenCount": 35},
        "modelVersion": model,
    }


def gemini_error_body(
    code: int, status: str, message: str, details: list[Any] | None = None
) -> dict[str, Any]:
    """A Google API error body (`{"error": {"code", "message", "status", "details"}}`)."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return {"error": error}


def gemini_error(code: int, status: str, message: str, details: list[Any] | None = None) -> Reply:
    """A Google API error reply."""
    return Reply(code, gemini_error_body(code, status, message, details))


def computer_call(
    call_id: str, action: Mapping[str, Any], safety_checks: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """One `computer_call` output item."""
    return {
        "type": "computer_call",
        "id": f"cu_{call_id}",
        "call_id": call_id,
        "action": dict(action),
        "pending_safety_checks": safety_checks or [],
        "status": "completed",
    }


def output_message(text: str) -> dict[str, Any]:
    """One assistant `message` output item."""
    return {
        "type": "message",
        "id": "msg_out",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning(text: str) -> dict[str, Any]:
    """One `reasoning` output item with a summary."""
    return {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": text}]}


def responses_error(status: int, message: str, code: str | None = None) -> Reply:
    """An OpenAI-style error reply, as the Responses API sends it."""
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }
    return Reply(status, body, headers={"x-request-id": f"req_{status}"})


# --- simulators -----------------------------------------------------------------


def _both_samplers_rejected(model: str) -> bool:
    return any(
        model.startswith(p) for p in ("claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5")
    )


class AnthropicSimulator:
    """`POST /v1/messages` with the API's request checks; replies with `text`."""

    text = "```python\npyautogui.click(10, 20)\n```"

    def __call__(self, received: Received) -> Reply:
        """Check the request as Anthropic does, then answer."""
        headers = received.headers
        if not headers.get("x-api-key"):
            return anthropic_error(401, "authentication_error", "x-api-key header is required")
        if headers.get("anthropic-version") != "2023-06-01":
            return anthropic_error(
                400, "invalid_request_error", "anthropic-version header is required"
            )
        body = received.json()
        if not isinstance(body.get("max_tokens"), int):
            return anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        turns = body.get("messages", [])
        if not turns or turns[0]["role"] != "user":
            return anthropic_error(
                400, "invalid_request_error", "first message must use the user role"
            )
        for before, after in itertools.pairwise(turns):
            if before["role"] == after["role"]:
                return anthropic_error(400, "invalid_request_error", "roles must alternate")
        for turn in turns:
            for block in turn["content"]:
                if block["type"] == "text" and not block["text"].strip():
                    return anthropic_error(
                        400,
                        "invalid_request_error",
                        "text content blocks must contain non-whitespace text",
                    )
        if "temperature" in body and "top_p" in body and _both_samplers_rejected(body["model"]):
            return anthropic_error(
                400,
                "invalid_request_error",
                "temperature and top_p cannot both be specified for this model. Please use only one.",
            )
        return Reply(200, anthropic_message(self.text, model=body["model"]))


class GeminiSimulator:
    """`POST /v1beta/models/{model}:generateContent` with the API's request checks."""

    text = "```python\npyautogui.click(30, 40)\n```"

    def __call__(self, received: Received) -> Reply:
        """Check the request as Gemini does, then answer."""
        if "key=" in received.query:
            return gemini_error(
                400, "INVALID_ARGUMENT", "test server: the key must not be in the URL"
            )
        if not received.headers.get("x-goog-api-key"):
            return gemini_error(
                403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers"
            )
        body = received.json()
        contents = body.get("contents", [])
        for before, after in itertools.pairwise(contents):
            if before["role"] == after["role"]:
                return gemini_error(400, "INVALID_ARGUMENT", "roles must alternate")
        if any(c["role"] not in ("user", "model") for c in contents):
            return gemini_error(400, "INVALID_ARGUMENT", "role must be user or model")
        model = received.path.rsplit("/", 1)[-1].removesuffix(":generateContent")
        return Reply(200, gemini_reply(self.text, model=model))


class ResponseChain:
    """What a Responses API server keeps between calls: each response's pending computer calls
    and safety checks. `problem(body)` is the 400 message a continuation that does not answer
    every pending call with a screenshot (its data URL starting with `screenshot_prefix`), or
    does not acknowledge the pending safety checks, gets; `store(output)` keeps a new response."""

    def __init__(self, screenshot_prefix: str = "data:image/png;base64,") -> None:
        self.screenshot_prefix = screenshot_prefix
        self.forget()

    def forget(self) -> None:
        """Forget every stored response."""
        self._pending: dict[str, tuple[set[str], set[str]]] = {}
        self._ids = itertools.count(1)

    def store(self, output: list[dict[str, Any]]) -> str:
        """Keep a response with this `output`; its id."""
        response_id = f"resp_{next(self._ids)}"
        calls = [i for i in output if i["type"] == "computer_call"]
        checks = {c["id"] for i in calls for c in i.get("pending_safety_checks", [])}
        self._pending[response_id] = ({i["call_id"] for i in calls}, checks)
        return response_id

    def problem(self, body: Mapping[str, Any]) -> str | None:
        """Why the API would refuse `body` as a continuation (`None`: it would not)."""
        previous = body.get("previous_response_id")
        if previous is None:
            return None
        if previous not in self._pending:
            return f"Previous response with id '{previous}' not found."
        calls, checks = self._pending[previous]
        answered: dict[str, Any] = {}
        acknowledged: set[str] = set()
        for item in body.get("input", []):
            if item.get("type") == "computer_call_output":
                answered[item["call_id"]] = item["output"]
                acknowledged |= {c["id"] for c in item.get("acknowledged_safety_checks", [])}
        missing = calls - set(answered)
        if missing:
            return f"No tool output found for computer call {sorted(missing)[0]}."
        for output in answered.values():
            url = output.get("image_url", "")
            if output.get("type") != "computer_screenshot" or not url.startswith(
                self.screenshot_prefix
            ):
                return "computer_call_output must carry a screenshot"
        if checks - acknowledged:
            return "Pending safety checks must be acknowledged to proceed."
        return None


class ResponsesSimulator:
    """`POST /v1/responses` keeping each response's pending calls and safety checks, as the API does.

    `script(*outputs)` queues the output item lists of the next responses. A
    request continuing a response must answer every pending `computer_call`
    with a screenshot, and must acknowledge its pending safety checks, or it
    gets the 400 the API sends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outputs: deque[list[dict[str, Any]]] = deque()
        self._chain = ResponseChain()

    def reset(self) -> None:
        """Forget scripted outputs and stored responses."""
        with self._lock:
            self._outputs.clear()
            self._chain.forget()

    def script(self, *outputs: list[dict[str, Any]]) -> None:
        """Queue the `output` lists of the next responses, in order."""
        with self._lock:
            self._outputs.extend(outputs)

    def __call__(self, received: Received) -> Reply:
        """Check chaining and safety-check rules, then answer with the next scripted output."""
        if not received.headers.get("authorization", "").startswith("Bearer "):
            return responses_error(401, "You didn't provide an API key.")
        body = received.json()
        tools = body.get("tools", [])
        if not tools or tools[0].get("type") != "computer_use_preview":
            return responses_error(
                400, "computer-use-preview requires the computer_use_preview tool"
            )
        with self._lock:
            problem = self._chain.problem(body)
            if problem is not None:
                return responses_error(400, problem)
            output = self._outputs.popleft() if self._outputs else [output_message("All done.")]
            response_id = self._chain.store(output)
        reply = {
            "id": response_id,
            "object": "response",
            "status": "completed",
            "model": f"{body['model']}-loopback",
            "output": output,
            "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110},
        }
        return Reply(200, reply, headers={"x-request-id": f"req_{response_id}"})


def install(
    server: LoopbackServer,
) -> tuple[AnthropicSimulator, GeminiSimulator, ResponsesSimulator]:
    """Add the three provider routes to `server` and return their simulators."""
    simulators = (AnthropicSimulator(), GeminiSimulator(), ResponsesSimulator())
    server.route("POST", ANTHROPIC_PATH, simulators[0])
    server.route("POST", GEMINI_PATH, simulators[1])
    server.route("POST", RESPONSES_PATH, simulators[2])
    return simulators
