"""A judge model on the loopback server: OpenAI and Anthropic routes that check the forced tool.

`JudgeSimulator.install(server)` answers `.../chat/completions` (OpenAI and every
OpenAI-compatible server) and `/v1/messages` (Anthropic). A request without tools
is a caption request: it must carry one image, and gets `caption` back. A judge
request must offer `record_verdict` and force its call in the provider's own
format (a 400 in the provider's error shape otherwise); it gets the next item of
`script` (a verdict's arguments, answered as that provider's tool call, or a ready
`Reply`), else the `default` verdict: safe and completed, or, for a model whose
name holds `strict`, unsafe at step 0 and not completed.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from typing import Any

from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion
from tests.adapters.provider_routes import anthropic_error, anthropic_message

TOOL = "record_verdict"


def verdict(
    success: bool = True, safety: bool = True, step: int | None = None, reasoning: str = "checked"
) -> dict[str, Any]:
    """The arguments of a `record_verdict` call."""
    return {"reasoning": reasoning, "success": success, "safety": safety, "violation_step": step}


def openai_tool_reply(
    arguments: dict[str, Any] | str, *, model: str = "judge-loopback", name: str = TOOL
) -> dict[str, Any]:
    """A Chat Completions reply calling `name` (arguments as the JSON text OpenAI sends)."""
    body = chat_completion(None, model=model, prompt_tokens=1200, completion_tokens=80)
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": text}}
    body["choices"][0]["message"]["tool_calls"] = [call]
    return body


def anthropic_tool_reply(
    arguments: Any, *, model: str = "claude-loopback", stop: str = "tool_use", name: str = TOOL
) -> dict[str, Any]:
    """A Messages API reply whose one content block is a `tool_use` of `name`."""
    body = anthropic_message("", model=model)
    body["content"] = [{"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}]
    body["stop_reason"] = stop
    return body


def _images(body: dict[str, Any], kind: str) -> int:
    return sum(
        part.get("type") == kind
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for part in message["content"]
    )


def openai_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with a judge request's tool fields, as OpenAI documents them."""
    tools = body.get("tools")
    if not isinstance(tools, list) or len(tools) != 1 or tools[0].get("type") != "function":
        return "tools must hold one function tool"
    function = tools[0].get("function", {})
    if function.get("name") != TOOL or function.get("parameters", {}).get("type") != "object":
        return "the function needs a name and an object schema as parameters"
    if body.get("tool_choice") != {"type": "function", "function": {"name": TOOL}}:
        return "tool_choice must name the function"
    return None


def anthropic_problem(received: Received, body: dict[str, Any]) -> str | None:
    """What is wrong with a Messages API judge request, as Anthropic documents it."""
    if not received.headers.get("x-api-key") or not isinstance(body.get("max_tokens"), int):
        return "x-api-key and max_tokens are required"
    turns = body.get("messages", [])
    if not turns or turns[0]["role"] != "user":
        return "first message must use the user role"
    if any(a["role"] == b["role"] for a, b in itertools.pairwise(turns)):
        return "roles must alternate"
    tools = body.get("tools")
    if "tool_choice" not in body and tools is None:
        return None
    if not isinstance(tools, list) or len(tools) != 1 or tools[0].get("name") != TOOL:
        return "tools must hold the one tool"
    if tools[0].get("input_schema", {}).get("type") != "object":
        return "tools.0.input_schema.type: Field required"
    if body.get("tool_choice") != {"type": "tool", "name": TOOL}:
        return "tool_choice must name the tool"
    return None


class JudgeSimulator:
    """Scripted judge replies and canned captions for both providers (see the module doc)."""

    def __init__(self) -> None:
        self.script: deque[dict[str, Any] | Reply] = deque()
        self.caption = "A text editor window shows a saved file named notes.txt."
        self.judged: list[dict[str, Any]] = []
        self.captioned: list[dict[str, Any]] = []

    def install(self, server: LoopbackServer) -> None:
        """Answer the judge's routes on `server`."""
        server.route("POST", r".*/chat/completions", self.chat)
        server.route("POST", r"/v1/messages", self.messages)

    def reset(self) -> None:
        """Forget the script and the requests."""
        self.script.clear()
        self.judged.clear()
        self.captioned.clear()

    def _next(self, body: dict[str, Any]) -> dict[str, Any] | Reply:
        self.judged.append(body)
        if self.script:
            return self.script.popleft()
        if "strict" in body["model"]:
            return verdict(success=False, safety=False, step=0, reasoning="acted on it")
        return verdict()

    def chat(self, received: Received) -> Reply:
        """OpenAI Chat Completions, or an OpenAI-compatible server."""
        body = received.json()
        if "tools" not in body and "tool_choice" not in body:
            if _images(body, "image_url") != 1:
                return Reply(400, {"error": {"message": "a caption request holds one image"}})
            self.captioned.append(body)
            return Reply(200, chat_completion(self.caption, model=body["model"]))
        problem = openai_problem(body)
        if problem is not None:
            return Reply(400, {"error": {"message": problem, "type": "invalid_request_error"}})
        item = self._next(body)
        return item if isinstance(item, Reply) else Reply(200, openai_tool_reply(item))

    def messages(self, received: Received) -> Reply:
        """Anthropic's Messages API."""
        body = received.json()
        problem = anthropic_problem(received, body)
        if problem is not None:
            return anthropic_error(400, "invalid_request_error", problem)
        if "tools" not in body:
            if _images(body, "image") != 1:
                return anthropic_error(400, "invalid_request_error", "one image expected")
            self.captioned.append(body)
            return Reply(200, anthropic_message(self.caption, model=body["model"]))
        item = self._next(body)
        if isinstance(item, Reply):
            return item
        return Reply(200, anthropic_tool_reply(item, model=body["model"]))
