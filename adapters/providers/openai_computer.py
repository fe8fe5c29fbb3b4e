"""OpenAI's generally available `computer` tool in the Responses API: registration.

Sources (wire formats as documented, nothing guessed):

- https://developers.openai.com/api/docs/guides/tools-computer-use (the GA `computer`
  tool for `gpt-5.4` and later, batched `actions` in one `computer_call`,
  `previous_response_id` chaining, `computer_call_output` carrying a
  `computer_screenshot`, pending safety checks and `acknowledged_safety_checks`);
- github.com/openai/openai-python, src/openai/types/responses/computer_tool.py
  (`{"type": "computer"}`), computer_action.py (the action shapes, with the
  optional held `keys`), response_computer_tool_call.py and
  response_computer_tool_call_output_screenshot.py.

The protocol itself is `adapters.providers.responses.ResponsesProvider` with
`tool="computer"`: the tool carries no display size or environment, each
`computer_call` may batch several actions (all converted, in order, through
`adapters.providers.computer_use`), every call is answered with the current
screenshot, and the calls are kept in `Continuation.native`. Pending safety
checks are surfaced and never acknowledged, as for the preview model.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from adapters.providers._credentials import keyed_client
from adapters.providers.openai_chat import API_KEY_ENV, DEFAULT_OPENAI_BASE_URL
from adapters.providers.responses import ResponsesProvider

if TYPE_CHECKING:
    from adapters.registry import ModelRegistry


_client = keyed_client(
    functools.partial(ResponsesProvider, tool="computer"),
    vendor="OpenAI",
    key_envs=(API_KEY_ENV,),
    url_envs=("OPENAI_BASE_URL",),
    default_url=DEFAULT_OPENAI_BASE_URL,
)


def register(registry: ModelRegistry) -> None:
    """`openai-computer/<model>`: an OpenAI model driving the desktop through the GA computer tool."""
    registry.register_scheme(
        "openai-computer",
        _client,
        description="openai-computer/<model> (Responses computer tool, e.g. gpt-5.4; OPENAI_API_KEY)",
        needs="OPENAI_API_KEY",
        computer_use=True,
    )


__all__ = ["register"]
