"""Azure OpenAI: the Chat Completions format on a per-deployment path with an `api-key` header.

`POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`;
the deployment, not a `model` field, selects the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import attrs

from adapters.base import HttpCall, ModelCallError, ModelRequest, ProviderReply
from adapters.openai_chat import chat_body, chat_error, decode_chat

#: The latest generally available data-plane inference API version when this was written.
DEFAULT_AZURE_API_VERSION: Final = "2024-10-21"


@attrs.frozen(kw_only=True)
class AzureOpenAIProvider:
    """Azure OpenAI chat completions for one deployment.

    `base_url` is the resource endpoint (`https://NAME.openai.azure.com`).
    The o-series parameter rule is decided on the request's model name, so
    name deployments after their model (or send requests with the model name).
    """

    base_url: str
    api_key: str = attrs.field(repr=False)
    deployment: str
    api_version: str = DEFAULT_AZURE_API_VERSION
    name: str = "azure"

    def encode(self, request: ModelRequest) -> HttpCall:
        """`POST` to the deployment's chat completions path with the `api-key` header."""
        url = (
            f"{self.base_url.rstrip('/')}/openai/deployments/{quote(self.deployment, safe='')}"
            f"/chat/completions?api-version={quote(self.api_version, safe='')}"
        )
        return HttpCall(
            method="POST",
            url=url,
            headers={"content-type": "application/json", "api-key": self.api_key},
            json=chat_body(request, include_model=False),
        )

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The text of `choices[0]`, as for OpenAI."""
        return decode_chat(self.name, request, body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for an error reply, as for OpenAI."""
        return chat_error(self.name, status, headers, body, text)
