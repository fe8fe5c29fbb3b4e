"""client_for: every name form resolves to the right provider, keys and URLs from the right place."""

from __future__ import annotations

import itertools
import re
from typing import Any

import httpx
import pytest

from adapters.contract import ModelClient, ModelRequest, ModelResponse
from adapters.engine.client import HttpModelClient
from adapters.engine.retry import RetryPolicy
from adapters.errors import ConfigurationError
from adapters.providers import register_builtins
from adapters.providers.anthropic import AnthropicProvider
from adapters.providers.azure import DEFAULT_AZURE_API_VERSION, AzureOpenAIProvider
from adapters.providers.gemini import GeminiProvider
from adapters.providers.openai_chat import COMPAT_SERVERS, OpenAIChatProvider
from adapters.providers.responses import ResponsesProvider
from adapters.registry import (
    REGISTRY,
    ClientOptions,
    ModelRegistry,
    client_for,
    model_table,
)
from osharm_core import AgentConfig, ConfigError, Message
from tests.adapters.conftest import FAKE_KEY

ENV_VARS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_DEPLOYMENT",
    "AZURE_OPENAI_API_VERSION",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GENAI_API_KEY",
    *(name for server in COMPAT_SERVERS for name in server.key_envs),
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No provider variable from the machine leaks into these tests."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def built(model: str, **kw: Any) -> HttpModelClient:
    """client_for(model) as the engine client it is."""
    client = client_for(model, **kw)
    assert isinstance(client, HttpModelClient)
    assert isinstance(client, ModelClient)
    return client


@pytest.mark.parametrize(
    ("model", "provider_type", "env"),
    [
        ("gpt-4o", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("gpt-4-vision-preview", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("chatgpt-4o-latest", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("o1", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("o3-mini", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("o4-mini", OpenAIChatProvider, "OPENAI_API_KEY"),
        ("computer-use-preview", ResponsesProvider, "OPENAI_API_KEY"),
        ("computer-use-preview-2025-03-11", ResponsesProvider, "OPENAI_API_KEY"),
        ("claude-3-7-sonnet-20250219", AnthropicProvider, "ANTHROPIC_API_KEY"),
        ("claude-sonnet-4-5", AnthropicProvider, "ANTHROPIC_API_KEY"),
        ("gemini-2.5-pro", GeminiProvider, "GEMINI_API_KEY"),
    ],
)
def test_bare_names_resolve_by_family(
    model: str, provider_type: type, env: str, clean_env: pytest.MonkeyPatch
) -> None:
    """A bare name picks its provider by family and is sent as it is."""
    clean_env.setenv(env, FAKE_KEY)
    client = built(model)
    assert type(client.provider) is provider_type
    assert client.model is None
    assert FAKE_KEY not in repr(client)


@pytest.mark.parametrize(
    ("model", "provider_type", "wire", "env"),
    [
        ("openai/gpt-4o", OpenAIChatProvider, "gpt-4o", "OPENAI_API_KEY"),
        ("openai|gpt-4o", OpenAIChatProvider, "gpt-4o", "OPENAI_API_KEY"),
        ("OpenAI|o3", OpenAIChatProvider, "o3", "OPENAI_API_KEY"),
        (
            "openai/computer-use-preview",
            ResponsesProvider,
            "computer-use-preview",
            "OPENAI_API_KEY",
        ),
        ("anthropic/claude-opus-4-1", AnthropicProvider, "claude-opus-4-1", "ANTHROPIC_API_KEY"),
        (
            "anthropic|claude-3-5-sonnet",
            AnthropicProvider,
            "claude-3-5-sonnet",
            "ANTHROPIC_API_KEY",
        ),
        ("gemini/gemini-2.0-flash", GeminiProvider, "gemini-2.0-flash", "GEMINI_API_KEY"),
        (
            "together/meta-llama/Llama-3.2-90B-Vision",
            OpenAIChatProvider,
            "meta-llama/Llama-3.2-90B-Vision",
            "TOGETHER_API_KEY",
        ),
        (
            "groq/llama-3.2-90b-vision-preview",
            OpenAIChatProvider,
            "llama-3.2-90b-vision-preview",
            "GROQ_API_KEY",
        ),
        (
            "openrouter/qwen/qwen2.5-vl-72b-instruct",
            OpenAIChatProvider,
            "qwen/qwen2.5-vl-72b-instruct",
            "OPENROUTER_API_KEY",
        ),
        ("dashscope/qwen-vl-max", OpenAIChatProvider, "qwen-vl-max", "DASHSCOPE_API_KEY"),
    ],
)
def test_prefixed_names_send_the_part_after_the_prefix(
    model: str, provider_type: type, wire: str, env: str, clean_env: pytest.MonkeyPatch
) -> None:
    """`provider/model` and `provider|model` pick the provider and send only the model part."""
    clean_env.setenv(env, FAKE_KEY)
    client = built(model)
    assert type(client.provider) is provider_type
    assert client.model == wire


@pytest.mark.parametrize(
    ("prefix", "url"),
    [
        ("together", "https://api.together.ai/v1"),
        ("groq", "https://api.groq.com/openai/v1"),
        ("openrouter", "https://openrouter.ai/api/v1"),
        ("ollama", "http://localhost:11434/v1"),
        ("vllm", "http://localhost:8000/v1"),
    ],
)
def test_convenience_prefixes_have_documented_base_urls(
    prefix: str, url: str, clean_env: pytest.MonkeyPatch
) -> None:
    """Known OpenAI-compatible services default to their documented base URL; base_url overrides it."""
    for server in COMPAT_SERVERS:
        for name in server.key_envs:
            clean_env.setenv(name, FAKE_KEY)
    client = built(f"{prefix}/some-model")
    assert client.provider.base_url == url  # type: ignore[attr-defined]
    assert client.provider.name == prefix
    other = built(f"{prefix}/some-model", base_url="http://127.0.0.1:9/v1/")
    assert other.provider.base_url == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]


def test_local_servers_need_no_key() -> None:
    """ollama/ and vllm/ work without any key and send no Authorization header."""
    client = built("ollama/llava:13b")
    assert client.model == "llava:13b"
    call = client.provider.encode(ModelRequest(model="llava:13b", messages=()))
    assert "authorization" not in call.headers


def test_compat_needs_a_base_url_and_never_borrows_the_openai_key(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """compat/ requires base_url, and does not send OPENAI_API_KEY to a third-party server."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    with pytest.raises(ConfigurationError, match="base_url"):
        client_for("compat/qwen2-vl")
    client = built("compat/qwen2-vl", base_url="http://127.0.0.1:8000/v1")
    call = client.provider.encode(ModelRequest(model="qwen2-vl", messages=()))
    assert call.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert "authorization" not in call.headers
    keyed = built("compat/qwen2-vl", base_url="http://127.0.0.1:8000/v1", api_key="local-key")
    assert keyed.provider.encode(ModelRequest(model="m", messages=())).headers["authorization"] == (
        "Bearer local-key"
    )


def test_openai_base_url_from_env_and_argument(clean_env: pytest.MonkeyPatch) -> None:
    """OPENAI_BASE_URL overrides the default; the base_url argument overrides both."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    assert built("gpt-4o").provider.base_url == "https://api.openai.com/v1"  # type: ignore[attr-defined]
    clean_env.setenv("OPENAI_BASE_URL", "https://proxy.test/v1")
    assert built("gpt-4o").provider.base_url == "https://proxy.test/v1"  # type: ignore[attr-defined]
    arg = built("gpt-4o", base_url="http://127.0.0.1:1/v1")
    assert arg.provider.base_url == "http://127.0.0.1:1/v1"  # type: ignore[attr-defined]


def test_explicit_key_wins_over_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    """api_key= is used even when the variable is set."""
    clean_env.setenv("OPENAI_API_KEY", "from-env-key")
    client = built("gpt-4o", api_key=FAKE_KEY)
    assert client.provider.api_key == FAKE_KEY  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("gpt-4o", "OPENAI_API_KEY"),
        ("computer-use-preview", "OPENAI_API_KEY"),
        ("claude-3-5-sonnet-20241022", "ANTHROPIC_API_KEY"),
        ("gemini-1.5-pro", "GEMINI_API_KEY or GENAI_API_KEY"),
        ("azure/gpt-4o", "AZURE_OPENAI_API_KEY"),
        ("together/x", "TOGETHER_API_KEY"),
        ("groq/x", "GROQ_API_KEY"),
        ("openrouter/x", "OPENROUTER_API_KEY"),
        ("dashscope/x", "DASHSCOPE_API_KEY"),
    ],
)
def test_missing_key_names_the_variable(model: str, variable: str) -> None:
    """Without a key, client_for raises a ConfigurationError naming the variable to set."""
    with pytest.raises(ConfigurationError, match=variable):
        client_for(model)


def test_gemini_accepts_the_reference_variable_name(clean_env: pytest.MonkeyPatch) -> None:
    """GENAI_API_KEY (the reference's name) works when GEMINI_API_KEY is unset."""
    clean_env.setenv("GENAI_API_KEY", FAKE_KEY)
    assert built("gemini-2.5-flash").provider.api_key == FAKE_KEY  # type: ignore[attr-defined]


def test_azure_from_environment(clean_env: pytest.MonkeyPatch) -> None:
    """Azure's endpoint, deployment, version and key come from AZURE_OPENAI_* when not given."""
    clean_env.setenv("AZURE_OPENAI_API_KEY", FAKE_KEY)
    with pytest.raises(ConfigurationError, match="AZURE_OPENAI_ENDPOINT"):
        client_for("azure/gpt-4o")
    clean_env.setenv("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com")
    client = built("azure/gpt4o-prod")
    provider = client.provider
    assert isinstance(provider, AzureOpenAIProvider)
    # No version set: chosen per request model (api_version_for), the GA one for gpt-4o.
    assert (provider.deployment, provider.api_version) == ("gpt4o-prod", None)
    call = provider.encode(ModelRequest(model="gpt4o-prod", messages=(Message("user", ()),)))
    assert call.url.endswith(f"api-version={DEFAULT_AZURE_API_VERSION}")
    assert client.model == "gpt4o-prod"
    with pytest.raises(ConfigurationError, match="AZURE_OPENAI_DEPLOYMENT"):
        client_for("azure/")
    clean_env.setenv("AZURE_OPENAI_DEPLOYMENT", "from-env")
    clean_env.setenv("AZURE_OPENAI_API_VERSION", "2025-04-01-preview")
    provider = built("azure/").provider
    assert isinstance(provider, AzureOpenAIProvider)
    assert (provider.deployment, provider.api_version) == ("from-env", "2025-04-01-preview")


@pytest.mark.parametrize(
    "model", ["mystery-model", "llama3:8b", "meta-llama/Llama-3", "gpt4o", "", "  "]
)
def test_an_unknown_name_is_one_short_line_pointing_to_the_table(model: str) -> None:
    """An unknown name raises a one-line ConfigurationError naming it and `osharm-agent models`."""
    with pytest.raises(ConfigurationError) as caught:
        client_for(model)
    message = str(caught.value)
    assert "\n" not in message
    assert len(message) < 250
    if model.strip():
        assert repr(model) in message
        assert "'osharm-agent models'" in message
        assert "compat/<model>" in message


@pytest.mark.parametrize(
    ("model", "closest"),
    [
        ("gpt4o", "gpt-4o"),
        ("GPT4o", "gpt-4o"),
        ("clade-opus-4-1", "claude-opus-4-1"),
        ("claud-sonnet-4-5", "claude-sonnet-4-5"),
        ("antropic/claude-opus-4-1", "anthropic/claude-opus-4-1"),
        ("opneai|gpt-4o", "openai/gpt-4o"),
    ],
)
def test_a_misspelt_name_suggests_the_closest_names(model: str, closest: str) -> None:
    """A misspelt bare name or scheme is answered with the closest registered name."""
    with pytest.raises(ConfigurationError, match=re.escape(f"did you mean {closest}")):
        client_for(model)


def test_a_colon_in_an_unknown_name_is_not_read_as_a_misspelt_scheme() -> None:
    """`llama3:8b` is a model tag, not `ollama` misspelt: nothing is suggested for it."""
    with pytest.raises(ConfigurationError) as caught:
        client_for("llama3:8b")
    assert "did you mean" not in str(caught.value)


def test_the_model_table_lists_every_form_with_provider_needs_and_computer_use() -> None:
    """`model_table()` has one aligned row per form `forms()` lists, with its provider, what
    it needs, and whether the form is native computer use."""
    lines = model_table().splitlines()
    header = lines[0]
    starts = [header.index(title) for title in ("provider", "needs", "native computer use")]
    rows = {
        line[: starts[0]].strip(): tuple(
            line[start:end].strip() for start, end in itertools.pairwise([*starts, None])
        )
        for line in lines[1:-1]
    }
    assert all(line[start - 2 : start] == "  " for line in lines[:-1] for start in starts)
    assert {form.split(" (")[0] for form in REGISTRY.forms()[:-1]} <= {
        form.split(" (")[0] for form in rows
    }
    assert rows["gpt-*"] == ("openai", "OPENAI_API_KEY", "no")
    assert rows["anthropic-computer/<claude model>"] == (
        "anthropic-computer",
        "ANTHROPIC_API_KEY",
        "yes",
    )
    assert rows["computer-use-preview* (Responses API)"][2] == "yes"
    assert rows["replay:<trajectory.jsonl or its directory>"][0] == "replay"


@pytest.mark.parametrize("model", ["openai/", "anthropic|", "compat/ "])
def test_a_prefix_without_a_model_is_an_error(model: str, clean_env: pytest.MonkeyPatch) -> None:
    """A prefix with nothing after it is a ConfigurationError, not a request for model ''."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    clean_env.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    with pytest.raises(ConfigurationError, match=r"no model name|begins or ends with whitespace"):
        client_for(model, base_url="http://127.0.0.1:1/v1")


@pytest.mark.parametrize("model", [" o3", "o3 ", "gpt-4o\n", "\tclaude-sonnet-4-5", " replay:x"])
def test_a_name_with_whitespace_around_it_is_refused(
    model: str, clean_env: pytest.MonkeyPatch
) -> None:
    """The name goes on the wire as given: `" o3"` reached the API and missed the o-series rules
    (sampling settings sent); both the registry and AgentConfig refuse it, naming it."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    clean_env.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    with pytest.raises(ConfigurationError, match="begins or ends with whitespace"):
        client_for(model, base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="must not begin or end with whitespace"):
        AgentConfig(model=model)


def test_bad_base_url_is_rejected(clean_env: pytest.MonkeyPatch) -> None:
    """A base URL that is not http(s) is a ConfigurationError at construction."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    with pytest.raises(ConfigurationError, match="http"):
        client_for("gpt-4o", base_url="api.openai.com/v1")


@pytest.mark.parametrize(
    ("base_url", "words"),
    [
        ("http://127.0.0.1:abc/v1", "is not a URL: Invalid port: 'abc'"),
        ("http://[::1", "is not a URL"),
        ("http://127.0.0.1:70000/v1", "has port 70000, outside 1-65535"),
        ("http://127.0.0.1:0/v1", "has port 0, outside 1-65535"),
        ("http:///v1", "names no host"),
    ],
)
def test_a_base_url_httpx_cannot_use_is_rejected_when_the_client_is_built(
    base_url: str, words: str
) -> None:
    """A malformed port or host passed the http(s) prefix check and failed at the first call
    with a raw httpx.InvalidURL; now httpx parses it when the client is built."""
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        client_for("compat/m", base_url=base_url)
    assert built("compat/m", base_url="http://127.0.0.1:65535/v1").provider.base_url.endswith("/v1")


@pytest.mark.parametrize(
    ("keyword", "value", "words"),
    [
        ("timeout", "30", "timeout must be an httpx.Timeout or a finite number of seconds > 0"),
        ("timeout", 0, "got int 0"),
        ("timeout", -1.5, "got float -1.5"),
        ("timeout", float("nan"), "got float nan"),
        ("timeout", True, "got bool True"),
        (
            "retry",
            3,
            "retry must be a RetryPolicy (e.g. RetryPolicy(attempts=3)) or None; got int 3",
        ),
        ("retry", {"attempts": 2}, "got dict {'attempts': 2}"),
        ("limiter", "x", "limiter must be a RateLimiter (or have its admit() method) or None"),
    ],
)
def test_timeout_retry_and_limiter_of_the_wrong_kind_are_refused_when_built(
    keyword: str, value: object, words: str
) -> None:
    """They were kept as given and failed at the first call with a raw AttributeError (after
    the request was built, with the trajectory's time spent); now a ConfigurationError here."""
    registry = ModelRegistry()
    register_builtins(registry)
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        registry.client_for("compat/m", base_url="http://127.0.0.1:9/v1", **{keyword: value})
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        HttpModelClient(OpenAIChatProvider(base_url="http://127.0.0.1:9/v1"), **{keyword: value})


@pytest.mark.parametrize("seconds", [30, 2.5])
def test_a_timeout_in_seconds_is_taken_as_httpx_and_the_openai_sdk_take_it(seconds: float) -> None:
    """timeout=30 means 30 s for every phase (connect, read, write, pool), an httpx.Timeout."""
    client = built("compat/m", base_url="http://127.0.0.1:9/v1", timeout=seconds)
    assert client.timeout == httpx.Timeout(float(seconds))
    direct = HttpModelClient(OpenAIChatProvider(base_url="http://127.0.0.1:9/v1"), timeout=seconds)
    assert direct.timeout == httpx.Timeout(float(seconds))


def test_http_client_retry_and_timeout_are_passed_through(clean_env: pytest.MonkeyPatch) -> None:
    """A sync or async httpx client lands in the right slot; retry and timeout are kept."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    sync_http, async_http = httpx.Client(), httpx.AsyncClient()
    policy, timeout = RetryPolicy(attempts=2), httpx.Timeout(5.0)
    one = built("gpt-4o", http_client=sync_http, retry=policy, timeout=timeout)
    two = built("gpt-4o", http_client=async_http)
    assert (one._given_client, one._given_async_client, one.retry, one.timeout) == (
        sync_http,
        None,
        policy,
        timeout,
    )
    assert (two._given_client, two._given_async_client) == (None, async_http)
    with pytest.raises(ConfigurationError, match="httpx"):
        client_for("gpt-4o", http_client=object())  # type: ignore[arg-type]
    sync_http.close()


class _Canned:
    """A tiny ModelClient for registry tests."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer with the model part of the name."""
        return ModelResponse(text=self.options.model, model="canned")

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """Same, asynchronously."""
        return self.complete(request)


def test_register_scheme_adds_a_name_form() -> None:
    """A registered scheme receives the part after `scheme:` (or / or |) and client_for's arguments."""
    registry = ModelRegistry()
    registry.register_scheme("replay", _Canned, description="replay:PATH")
    client = registry.client_for("replay:runs/task-1/traj.jsonl", api_key=FAKE_KEY)
    assert isinstance(client, _Canned)
    options = client.options
    assert (options.scheme, options.model, options.prefixed) == (
        "replay",
        "runs/task-1/traj.jsonl",
        True,
    )
    assert FAKE_KEY not in repr(options)
    assert "replay:PATH" in "\n".join(registry.forms())


def test_register_family_routes_bare_names() -> None:
    """A registered family sends matching bare names, whole, to its scheme."""
    registry = ModelRegistry()
    registry.register_scheme("fake", _Canned)
    registry.register_family(r"fake-", "fake", description="fake-*")
    client = registry.client_for("fake-model-1")
    assert isinstance(client, _Canned)
    assert (client.options.model, client.options.prefixed) == ("fake-model-1", False)
    with pytest.raises(ValueError, match="register scheme"):
        registry.register_family(r"x-", "unknown")


def test_schemes_are_not_silently_replaced() -> None:
    """Registering a taken prefix fails unless replace=True; prefixes are single words."""
    registry = ModelRegistry()
    register_builtins(registry)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_scheme("openai", _Canned)
    registry.register_scheme("openai", _Canned, replace=True)
    assert isinstance(registry.client_for("openai/gpt-4o"), _Canned)
    with pytest.raises(ValueError, match="one word"):
        registry.register_scheme("a/b", _Canned)


def test_client_for_does_no_io(clean_env: pytest.MonkeyPatch) -> None:
    """Building a client opens no connection and builds no httpx client yet."""
    clean_env.setenv("OPENAI_API_KEY", FAKE_KEY)
    client = built("gpt-4o")
    assert client._own_client is None
    assert len(client._own_async) == 0


class _EntryPoint:
    """Stands in for an installed `osharm_core.providers` entry point."""

    def __init__(self, name: str, value: object) -> None:
        self.name = name
        self._value = value

    def load(self) -> object:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


def test_plugins_register_through_the_same_hook_as_the_built_ins(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry point's register(registry) adds a scheme; a broken plugin is logged and skipped."""
    from adapters import registry as registry_module

    class Plugin:
        @staticmethod
        def register(registry: ModelRegistry) -> None:
            registry.register_scheme("acme", _Canned, description="acme/<model>")

    def function_plugin(registry: ModelRegistry) -> None:
        registry.register_family(r"acme-", "acme", description="acme-*")

    plugins = [
        _EntryPoint("acme", Plugin),
        _EntryPoint("acme-family", function_plugin),
        _EntryPoint("broken", ImportError("no module named acme_sdk")),
    ]

    def entry_points(*, group: str) -> list[_EntryPoint]:
        return plugins if group == registry_module.PLUGIN_GROUP else []

    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points", entry_points)
    registry = registry_module.default_registry()
    assert isinstance(registry.client_for("acme/rocket-1"), _Canned)
    assert isinstance(registry.client_for("acme-rocket-2"), _Canned)
    assert "provider plugin 'broken' could not register" in caplog.text
    assert registry.resolve("gpt-4o")[0] == "openai"
    assert registry.resolve("replay:run/trajectory.jsonl")[0] == "replay"


_BAD_KEYS = ["sk-ant-SECRÉT-123", "sk-SECRET 123", "sk-SECRET\n", "sk-\u200bSECRET"]


def _provider_classes() -> list[Any]:
    from adapters.providers.anthropic_computer import AnthropicComputerProvider
    from adapters.providers.gemini_computer import GeminiComputerProvider

    return [
        lambda key: AnthropicProvider(api_key=key),
        lambda key: AnthropicComputerProvider(api_key=key),
        lambda key: GeminiProvider(api_key=key),
        lambda key: GeminiComputerProvider(api_key=key),
        lambda key: OpenAIChatProvider(api_key=key),
        lambda key: ResponsesProvider(api_key=key),
        lambda key: ResponsesProvider(api_key=key, tool="computer"),
        lambda key: AzureOpenAIProvider(base_url="https://x.test", api_key=key, deployment="d"),
    ]


@pytest.mark.parametrize("key", _BAD_KEYS)
@pytest.mark.parametrize("build", _provider_classes())
def test_a_key_no_header_can_carry_is_refused_when_a_provider_is_built(
    build: Any, key: str
) -> None:
    """HttpModelClient(AnthropicProvider(api_key=...)) is the documented way to build a client:
    a non-ASCII key (or one with a space or line break) is a ConfigurationError there, never a
    UnicodeEncodeError from the first request whose `.object` holds the whole key."""
    with pytest.raises(ConfigurationError, match="API key in api_key") as caught:
        build(key)
    shown = repr(caught.value) + str(caught.value) + repr(vars(caught.value))
    assert "SECR" not in shown
    assert caught.value.__context__ is None
    assert caught.value.__cause__ is None


@pytest.mark.parametrize("build", _provider_classes())
def test_a_key_that_is_not_a_string_is_refused_when_a_provider_is_built(build: Any) -> None:
    with pytest.raises(ConfigurationError, match="must be a string"):
        build(b"sk-bytes")


def test_good_keys_and_no_key_still_build() -> None:
    """An ordinary key, and no key for a local OpenAI-compatible server, are accepted."""
    for build in _provider_classes():
        assert build(FAKE_KEY).api_key == FAKE_KEY
    assert OpenAIChatProvider(api_key=None).api_key is None
