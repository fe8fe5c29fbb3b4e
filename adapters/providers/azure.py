"""Azure OpenAI: the Chat Completions format on a per-deployment path with an `api-key` header.

`POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`;
the deployment, not a `model` field, selects the model.

Reasoning deployments (o1, o3, o3-mini, o4-mini, gpt-5, ...) are refused under the GA
api-version 2024-10-21 with a 400 "Model {modelName} is enabled only for api versions
2024-12-01-preview and later"; Azure's reasoning-model page lists `2025-04-01-preview` for the
o-series (learn.microsoft.com, "Azure OpenAI reasoning models", API & feature support), so that
is their default when no version is set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import attrs

from adapters._wire import error_text, request_id_from
from adapters.contract import HttpCall, ModelClient, ModelRequest
from adapters.errors import ConfigurationError, ModelCallError
from adapters.providers._credentials import from_env, require_key, require_url, valid_key
from adapters.providers.openai_chat import (
    ChatCompletionsReplies,
    chat_body,
    error_fields,
    leaves_out_sampling,
)

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry

#: The latest generally available data-plane inference API version when this was written.
DEFAULT_AZURE_API_VERSION: Final = "2024-10-21"
#: The version reasoning deployments get when none is set (the GA one refuses them).
REASONING_AZURE_API_VERSION: Final = "2025-04-01-preview"
#: The environment variable `client_for` reads the API version from.
API_VERSION_ENV: Final = "AZURE_OPENAI_API_VERSION"

_TOO_OLD: Final = re.compile(r"enabled only for api versions? (\S+) and later", re.IGNORECASE)


def api_version_for(model: str) -> str:
    """The api-version sent for `model` when none is set: reasoning models need a newer one.

    >>> api_version_for("gpt-4o"), api_version_for("o3-mini"), api_version_for("gpt-5")
    ('2024-10-21', '2025-04-01-preview', '2025-04-01-preview')
    """
    return REASONING_AZURE_API_VERSION if leaves_out_sampling(model) else DEFAULT_AZURE_API_VERSION


@attrs.frozen(kw_only=True)
class AzureOpenAIProvider(ChatCompletionsReplies):
    """Azure OpenAI chat completions for one deployment.

    `base_url` is the resource endpoint (`https://NAME.openai.azure.com`).
    The o-series parameter rule is decided on the request's model name, so
    name deployments after their model (or send requests with the model name).
    `api_version` is sent as it is; `None` (the default) picks one per request
    model (see `api_version_for`).
    """

    base_url: str
    api_key: str = attrs.field(repr=False, validator=valid_key)
    deployment: str
    api_version: str | None = None
    name: str = "azure"

    def encode(self, request: ModelRequest) -> HttpCall:
        """`POST` to the deployment's chat completions path with the `api-key` header."""
        version = self.api_version or api_version_for(request.model)
        url = (
            f"{self.base_url.rstrip('/')}/openai/deployments/{quote(self.deployment, safe='')}"
            f"/chat/completions?api-version={quote(version, safe='')}"
        )
        return HttpCall(
            method="POST",
            url=url,
            headers={"content-type": "application/json", "api-key": self.api_key},
            json=chat_body(request, include_model=False),
        )

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for an error reply (see `chat_error`); a deployment refusing the
        api-version is a `ModelCallError` (never retried: every try is refused) naming what
        to set."""
        message, _, _ = error_fields(body)
        needed = _TOO_OLD.search(message or "")
        if status == 400 and needed is not None:
            return ModelCallError(
                f"the deployment {error_text(self.deployment)!r} needs api-version "
                f"{error_text(needed.group(1))} or later: set {API_VERSION_ENV} (or "
                f"AzureOpenAIProvider(api_version=...)) to it ({message})",
                provider=self.name,
                status=status,
                request_id=request_id_from(headers),
            )
        return super().error(status, headers, body, text)


# --- registration ------------------------------------------------------------------


def _client(options: ClientOptions) -> ModelClient:
    key = require_key(options.api_key, ("AZURE_OPENAI_API_KEY",), provider="Azure OpenAI")
    endpoint = require_url(options.base_url, ("AZURE_OPENAI_ENDPOINT",), what="Azure OpenAI")
    deployment = options.model.strip() or from_env(("AZURE_OPENAI_DEPLOYMENT",))
    if not deployment:
        raise ConfigurationError(
            "Azure OpenAI needs a deployment: use azure/<deployment> or set AZURE_OPENAI_DEPLOYMENT"
        )
    version = from_env((API_VERSION_ENV,))
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
        needs="AZURE_OPENAI_API_KEY, AZURE_OPENAI_ENDPOINT",
    )
