"""Azure OpenAI: the Chat Completions format on a per-deployment path with an `api-key` header.

`POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`;
the deployment, not a `model` field, selects the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import attrs

from adapters.contract import HttpCall, ModelClient, ModelRequest
from adapters.errors import ConfigurationError
from adapters.providers._credentials import from_env, require_key, require_url, valid_key
from adapters.providers.openai_chat import ChatCompletionsReplies, chat_body

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry

#: The latest generally available data-plane inference API version when this was written.
DEFAULT_AZURE_API_VERSION: Final = "2024-10-21"


@attrs.frozen(kw_only=True)
class AzureOpenAIProvider(ChatCompletionsReplies):
    """Azure OpenAI chat completions for one deployment.

    `base_url` is the resource endpoint (`https://NAME.openai.azure.com`).
    The o-series parameter rule is decided on the request's model name, so
    name deployments after their model (or send requests with the model name).
    """

    base_url: str
    api_key: str = attrs.field(repr=False, validator=valid_key)
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


# --- registration ------------------------------------------------------------------


def _client(options: ClientOptions) -> ModelClient:
    key = require_key(options.api_key, ("AZURE_OPENAI_API_KEY",), provider="Azure OpenAI")
    endpoint = require_url(options.base_url, ("AZURE_OPENAI_ENDPOINT",), what="Azure OpenAI")
    deployment = options.model.strip() or from_env(("AZURE_OPENAI_DEPLOYMENT",))
    if not deployment:
        raise ConfigurationError(
            "Azure OpenAI needs a deployment: use azure/<deployment> or set AZURE_OPENAI_DEPLOYMENT"
        )
    version = from_env(("AZURE_OPENAI_API_VERSION",)) or DEFAULT_AZURE_API_VERSION
    provider = AzureOpenAIProvider(
        base_url=endpoint, api_key=key, deployment=deployment, api_version=version
    )
    return options.http_client_for(provider, model=deployment)


def register(registry: ModelRegistry) -> None:
    """`azure/<deployment>` names."""
    registry.register_scheme(
        "azure",
        _client,
        description="azure/<deployment> (AZURE_OPENAI_API_KEY, AZURE_OPENAI_ENDPOINT)",
    )
