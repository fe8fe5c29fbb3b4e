"""`client_for(model)`: the model name picks the provider, the environment supplies keys.

Names resolve in two ways:

* a *scheme* prefix: `scheme/model`, `scheme|model` (the form some OS-Harm
  forks use) or `scheme:model`; the part after the first separator is the
  model name sent on the wire (`compat/llama3` sends `llama3`);
* a bare name matched by a *family* pattern (`gpt-4o` is OpenAI's,
  `claude-...` Anthropic's), sent as it is.

Built-in providers register through the same public hooks as anything else:
each provider module has a `register(registry)` function calling
`register_scheme` / `register_family`, and an installed package adds its own
with an entry point in the `osharm_core.providers` group (an object with a
`register(registry)` method, or the function itself). Missing keys are reported when the client is
built, naming the variable to set; an unknown name is one line suggesting the
closest known names, and `model_table()` (`osharm-agent models`) lists every form.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import re
from collections.abc import Callable
from typing import Final

import attrs
import httpx

from adapters.contract import ModelClient, Provider
from adapters.engine.client import (
    HttpModelClient,
    client_limiter,
    client_retry,
    client_timeout,
)
from adapters.engine.limits import Limiter
from adapters.engine.retry import RetryPolicy
from adapters.errors import ConfigurationError
from osharm_core.errors import excerpt
from osharm_core.scaling import preset_for_model

logger = logging.getLogger(__name__)

_SEPARATORS: Final = re.compile(r"[/|:]")
#: The entry-point group third-party providers register under.
PLUGIN_GROUP: Final = "osharm_core.providers"


@attrs.frozen(kw_only=True)
class ClientOptions:
    """What a factory gets: the name split into scheme and model, and `client_for`'s arguments.

    `name` is the full name as given; `model` the part after the scheme
    prefix (the whole name for a family match); `prefixed` tells which.
    """

    name: str
    scheme: str
    model: str
    prefixed: bool
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    http_client: httpx.Client | None = None
    async_http_client: httpx.AsyncClient | None = None
    retry: RetryPolicy | None = None
    timeout: httpx.Timeout | None = None
    limiter: Limiter | None = None
    max_connections: int | None = None

    def http_client_for(self, provider: Provider, *, model: str | None = None) -> HttpModelClient:
        """An `HttpModelClient` for `provider` with these options' transport, retry and timeout.

        The wire model name is `model` if given, else the name after the
        prefix when there was one (bare names are sent as each request says).
        """
        wire = model if model is not None else (self.model if self.prefixed else None)
        return HttpModelClient(
            provider,
            http_client=self.http_client,
            async_http_client=self.async_http_client,
            retry=self.retry,
            timeout=self.timeout,
            model=wire,
            limiter=self.limiter,
            max_connections=self.max_connections,
        )


#: Builds a client for resolved options; raises `ConfigurationError` when it cannot.
ClientFactory = Callable[[ClientOptions], ModelClient]


@attrs.frozen
class _Scheme:
    factory: ClientFactory
    description: str
    needs: str
    computer_use: bool


@attrs.frozen
class _Family:
    pattern: re.Pattern[str]
    scheme: str
    description: str
    examples: tuple[str, ...]
    computer_use: bool | None


#: The column titles of `ModelRegistry.table()`.
TABLE_HEADER: Final = ("name form", "provider", "needs", "native computer use")


class ModelRegistry:
    """Model-name schemes and families, and `client_for` over them.

    The module-level `REGISTRY` holds the built-ins; build a fresh
    `ModelRegistry()` to test your own registrations in isolation.
    """

    def __init__(self) -> None:
        self._schemes: dict[str, _Scheme] = {}
        self._families: list[_Family] = []

    def register_scheme(
        self,
        prefix: str,
        factory: ClientFactory,
        *,
        description: str = "",
        replace: bool = False,
        needs: str = "",
        computer_use: bool = False,
    ) -> None:
        """Make `prefix/...`, `prefix|...` and `prefix:...` names resolve through `factory`.

        `description` is the form's line in `forms()` (e.g. `"compat/<model> (base_url=...)"`):
        its text before ` (` is the name form `table()` shows, `needs` what the client needs
        (key variables, a base URL; default: the description's words in parentheses), and
        `computer_use` whether the model drives the desktop through a native computer-use
        protocol. Registering a taken prefix raises `ValueError` unless `replace` is true.
        """
        key = prefix.strip().lower().rstrip("/|:")
        if not key or _SEPARATORS.search(key):
            raise ConfigurationError(
                f"a scheme prefix is one word without / | or :; got {prefix!r}"
            )
        if key in self._schemes and not replace:
            raise ConfigurationError(f"scheme {key!r} is already registered (pass replace=True)")
        text = description or f"{key}/<model>"
        self._schemes[key] = _Scheme(factory, text, needs or _details(text), computer_use)

    def register_family(
        self,
        pattern: str,
        scheme: str,
        *,
        description: str = "",
        examples: tuple[str, ...] = (),
        computer_use: bool | None = None,
    ) -> None:
        """Send bare names matching regex `pattern` (from their start) to the registered `scheme`.

        Families are tried in registration order; the first match wins. `examples` are
        well-known names of the family, offered when a misspelt name is close to one;
        `computer_use` overrides the scheme's flag in `table()`.
        """
        key = scheme.lower()
        if key not in self._schemes:
            raise ConfigurationError(f"register scheme {key!r} before a family that uses it")
        compiled = re.compile(pattern)
        self._families.append(
            _Family(compiled, key, description or pattern, tuple(examples), computer_use)
        )

    def forms(self) -> tuple[str, ...]:
        """One line per supported name form, for help texts and errors."""
        families = tuple(f"{f.description} ({f.scheme})" for f in self._families)
        schemes = tuple(s.description for s in self._schemes.values())
        return (*families, *schemes, "provider|model (same as provider/model)")

    def table(self, words: Callable[[str], str] = str) -> str:
        """Every supported name form as an aligned text table: the form, the provider (scheme)
        it reaches, what its client needs (in `words`: the CLI names its options), and whether
        it speaks a native computer-use protocol.
        """
        rows = [
            (f.description, f.scheme, words(self._schemes[f.scheme].needs), self._native(f))
            for f in self._families
        ]
        rows += [
            (_form(s.description), key, words(s.needs), "yes" if s.computer_use else "no")
            for key, s in self._schemes.items()
        ]
        widths = [max(len(row[i]) for row in (TABLE_HEADER, *rows)) for i in range(3)]
        lines = [
            "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[3]])
            for row in (TABLE_HEADER, *rows)
        ]
        lines.append("Every scheme/model form may also be written scheme:model or scheme|model.")
        return "\n".join(lines) + "\n"

    def _native(self, family: _Family) -> str:
        flag = family.computer_use
        return (
            "yes" if (self._schemes[family.scheme].computer_use if flag is None else flag) else "no"
        )

    def suggestions(self, model: str, limit: int = 3) -> tuple[str, ...]:
        """The registered names closest to an unknown `model`: for `scheme/model` with an
        unknown scheme, the same model under the closest schemes; for a bare name, the closest
        example names of the families.

        >>> REGISTRY.suggestions("gpt4o")[0], REGISTRY.suggestions("antropic/claude-opus-4-1")
        ('gpt-4o', ('anthropic/claude-opus-4-1',))
        """
        name = model.strip()
        match = re.search(r"[/|]", name)  # a colon is often part of a model name (`llama3:8b`)
        if match is not None:
            prefix, rest = name[: match.start()].lower(), name[match.end() :]
            close = difflib.get_close_matches(prefix, self._schemes, limit, cutoff=0.75)
            return tuple(f"{scheme}/{rest}" for scheme in close)
        examples = {e.lower(): e for f in self._families for e in f.examples}
        return tuple(
            examples[e]
            for e in difflib.get_close_matches(name.lower(), examples, limit, cutoff=0.75)
        )

    def resolve(self, model: str) -> tuple[str, str, bool]:
        """`(scheme, model after the prefix, prefixed)` for a model name, or a `ConfigurationError`."""
        name = model.strip()
        if name and name != model:
            raise ConfigurationError(
                f"model name {excerpt(model)} begins or ends with whitespace; the name is sent "
                "to the provider as given, so it must be exact"
            )
        match = _SEPARATORS.search(name)
        if match is not None:
            scheme = name[: match.start()].lower()
            if scheme in self._schemes:
                return scheme, name[match.end() :], True
        for family in self._families:
            if family.pattern.match(name):
                return family.scheme, name, False
        raise ConfigurationError(self._unknown(model))

    def _unknown(self, model: str) -> str:
        """The one-line unknown-name message: the closest names, where the forms are listed."""
        close = self.suggestions(model)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        compat = self._schemes.get("compat")
        other = f"; any OpenAI-compatible server: {compat.description}" if compat else ""
        return (
            f"unknown model name {excerpt(model)}{hint}; 'osharm-agent models' lists the "
            f"supported forms{other}"
        )

    def client_for(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout | float | None = None,
        limiter: Limiter | None = None,
        max_connections: int | None = None,
    ) -> ModelClient:
        """A client for `model` (see the module doc for the name forms); `timeout` may be
        seconds (made an `httpx.Timeout`), and a `timeout`, `retry`, `limiter` or
        `http_client` of the wrong kind is a `ConfigurationError` here."""
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"a model name is a non-empty string; got {model!r}")
        scheme, rest, prefixed = self.resolve(model)
        sync_client: httpx.Client | None = None
        async_client: httpx.AsyncClient | None = None
        if isinstance(http_client, httpx.AsyncClient):
            async_client = http_client
        elif isinstance(http_client, httpx.Client):
            sync_client = http_client
        elif http_client is not None:
            raise ConfigurationError(
                f"http_client must be an httpx.Client or httpx.AsyncClient; got {type(http_client).__name__}"
            )
        retry = client_retry(retry)
        timeout = client_timeout(timeout)
        limiter = client_limiter(limiter)
        options = ClientOptions(
            name=model,
            scheme=scheme,
            model=rest,
            prefixed=prefixed,
            base_url=base_url,
            api_key=api_key,
            http_client=sync_client,
            async_http_client=async_client,
            retry=retry,
            timeout=timeout,
            limiter=limiter,
            max_connections=max_connections,
        )
        return self._schemes[scheme].factory(options)


def _form(description: str) -> str:
    """The name form of a description: its text before the first ` (`."""
    return description.split(" (", 1)[0]


def _details(description: str) -> str:
    """The words of a description in its outer parentheses (`""` when it has none)."""
    return description.partition(" (")[2].removesuffix(")")


def _load_plugins(registry: ModelRegistry) -> None:
    """Run the `register(registry)` hook of every installed `osharm_core.providers` entry point."""
    for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        try:
            hook = entry.load()
            (hook.register if hasattr(hook, "register") else hook)(registry)
        except Exception as exc:  # a broken plugin must not break the built-in providers
            logger.warning("provider plugin %r could not register: %s", entry.name, exc)


def default_registry() -> ModelRegistry:
    """A registry with the built-in providers, `replay:`, and every installed plugin.

    Built-ins register through the same `register(registry)` hook a plugin
    module offers (see `adapters.providers`).
    """
    from adapters import providers  # the providers import this module's types
    from adapters.trajectories import replay

    registry = ModelRegistry()
    providers.register_builtins(registry)
    replay.register(registry)
    _load_plugins(registry)
    return registry


#: The registry `client_for` uses.
REGISTRY: Final = default_registry()


def client_for(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    http_client: httpx.Client | httpx.AsyncClient | None = None,
    retry: RetryPolicy | None = None,
    timeout: httpx.Timeout | float | None = None,
) -> ModelClient:
    """A model client for `model`, chosen by its name.

    Bare names by family (`gpt-*`, `o<digit>*`, `computer-use-preview*`,
    `claude-*`, `gemini-*`) or a provider prefix (`openai/`, `azure/`,
    `anthropic/`, `gemini/`, `compat/`, `together/`, `groq/`, `openrouter/`,
    `dashscope/`, `ollama/`, `vllm/`, `llamacpp/`; `provider|model` works
    too). `base_url` follows each provider's SDK (OpenAI-style ones include
    `/v1`; Anthropic and Gemini take the host root). Keys come from
    `api_key` or the provider's environment variable; a missing key raises
    `ConfigurationError` naming it, here and not at the first call.
    `timeout` is an `httpx.Timeout` or a number of seconds for every phase (as
    httpx and the openai SDK take it; default: read 120 s, connect 10 s);
    `retry` a `RetryPolicy`. Either of another kind, a malformed `base_url`
    (not http(s), an invalid or out-of-range port, no host) or an `http_client`
    that is not an httpx client is a `ConfigurationError`, here too.
    (`REGISTRY.client_for(..., limiter=..., max_connections=...)` also takes a rate
    limiter shared with the model's other clients, see `adapters.engine.limits`, and
    the size of the client's connection pool, see `adapters.engine.pools`.)

    >>> client_for("gpt4o")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: unknown model name 'gpt4o' (did you mean gpt-4o...
    """
    return REGISTRY.client_for(
        model,
        base_url=base_url,
        api_key=api_key,
        http_client=http_client,
        retry=retry,
        timeout=timeout,
    )


#: Add a name scheme to the registry `client_for` uses (see `ModelRegistry.register_scheme`).
register_scheme: Final = REGISTRY.register_scheme
#: Add a bare-name family to the registry `client_for` uses (see `ModelRegistry.register_family`).
register_family: Final = REGISTRY.register_family


def model_table() -> str:
    """The table `osharm-agent models` prints: every name form `client_for` accepts, its
    provider, what it needs and whether it is native computer use (`ModelRegistry.table`)."""
    return REGISTRY.table()


def scaling_preset_for(model: str) -> str:
    """The scaling preset `AgentConfig(scaling="auto")` uses for `model`.

    The name is resolved as `client_for` would (so an unknown name raises
    `ConfigurationError`), then the family table of `osharm_core.scaling`
    picks the preset from the model part of the name.

    >>> scaling_preset_for("claude-sonnet-4-5")
    'claude'
    """
    _, rest, _ = REGISTRY.resolve(model)
    return preset_for_model(rest)
