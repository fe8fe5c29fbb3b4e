"""The edge of osharm-core: model clients, the PromptAgent facade, the CLI, trajectories.

`PromptAgent` drops into OSWorld / OS-Harm loops; `client_for(model)` builds a
client for any supported model name; `FakeClient` and the replay pieces make
runs reproducible without a model or a VM.
"""

from adapters.accounting import Budget, PriceTable, UsageTotals, load_prices, step_cost
from adapters.agent import PromptAgent
from adapters.contract import (
    HttpCall,
    ModelClient,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderReply,
    Usage,
)
from adapters.engine.body import DEFAULT_MAX_RESPONSE_BYTES
from adapters.engine.client import HttpModelClient
from adapters.engine.limits import RateLimiter
from adapters.engine.retry import NO_RETRIES, RetryPolicy
from adapters.engine.transport import ShardedAsyncTransport
from adapters.errors import (
    AgentBusyError,
    AuthenticationError,
    BadRequestError,
    BudgetExceeded,
    ClientClosedError,
    ConfigError,
    ConfigurationError,
    ContextLengthError,
    DeadlineExceededError,
    EnvironmentFailure,
    FakeClientExhausted,
    MixedRunError,
    ModelCallError,
    QuotaExceededError,
    RateLimitWaitError,
    RedirectError,
    ReplayExhausted,
    RepliesExhausted,
    ReportError,
    ResponseDecodeError,
    ResponseTooLargeError,
    RetryableError,
    RevertFailure,
    SafetyCheckPending,
    ServerLimitError,
    ServerUnreachableError,
    TaskSetupError,
    TrajectoryError,
    TrajectoryExistsError,
    UnsupportedComputerAction,
    UnwritableRecord,
    UsageError,
)
from adapters.providers.anthropic import AnthropicProvider
from adapters.providers.anthropic_computer import AnthropicComputerProvider
from adapters.providers.azure import AzureOpenAIProvider
from adapters.providers.gemini import GeminiProvider
from adapters.providers.gemini_computer import GeminiComputerProvider
from adapters.providers.openai_chat import OpenAIChatProvider
from adapters.providers.responses import ResponsesProvider
from adapters.record import ActionRecord, EpisodeEnd, Recorder, StepRecord
from adapters.registry import ModelRegistry, client_for, register_family, register_scheme
from adapters.runs import (
    AsyncEnv,
    DesktopEnvAdapter,
    Env,
    OSWorldServerEnv,
    OsworldTask,
    RevertCommand,
    RunResult,
    RunSummary,
    TaskOutcome,
    arun_task_list,
    in_thread,
    is_finished,
    load_task_list,
    run_task_list,
)
from adapters.runs.episode import Episode, arun_episode, run_episode
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import (
    TrajectoryEntry,
    TrajectoryFile,
    TrajectoryRecorder,
    open_trajectory,
    read_trajectory,
)
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.replay import ForkClient, ReplayClient, ReplayEnv

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "NO_RETRIES",
    "ActionRecord",
    "AgentBusyError",
    "AnthropicComputerProvider",
    "AnthropicProvider",
    "AsyncEnv",
    "AuthenticationError",
    "AzureOpenAIProvider",
    "BadRequestError",
    "Budget",
    "BudgetExceeded",
    "ClientClosedError",
    "ConfigError",
    "ConfigurationError",
    "ContextLengthError",
    "DeadlineExceededError",
    "DesktopEnvAdapter",
    "Env",
    "EnvironmentFailure",
    "Episode",
    "EpisodeEnd",
    "FakeClient",
    "FakeClientExhausted",
    "ForkClient",
    "GeminiComputerProvider",
    "GeminiProvider",
    "HttpCall",
    "HttpModelClient",
    "MixedRunError",
    "ModelCallError",
    "ModelClient",
    "ModelRegistry",
    "ModelRequest",
    "ModelResponse",
    "OSWorldServerEnv",
    "OpenAIChatProvider",
    "OsworldTask",
    "PriceTable",
    "PromptAgent",
    "Provider",
    "ProviderReply",
    "QuotaExceededError",
    "RateLimitWaitError",
    "RateLimiter",
    "Recorder",
    "RedirectError",
    "ReplayClient",
    "ReplayEnv",
    "ReplayExhausted",
    "RepliesExhausted",
    "ReportError",
    "ResponseDecodeError",
    "ResponseTooLargeError",
    "ResponsesProvider",
    "ResultWriter",
    "RetryPolicy",
    "RetryableError",
    "RevertCommand",
    "RevertFailure",
    "RunResult",
    "RunSummary",
    "SafetyCheckPending",
    "ServerLimitError",
    "ServerUnreachableError",
    "ShardedAsyncTransport",
    "StepRecord",
    "TaskInfo",
    "TaskOutcome",
    "TaskSetupError",
    "TrajectoryEntry",
    "TrajectoryError",
    "TrajectoryExistsError",
    "TrajectoryFile",
    "TrajectoryRecorder",
    "UnsupportedComputerAction",
    "UnwritableRecord",
    "Usage",
    "UsageError",
    "UsageTotals",
    "arun_episode",
    "arun_task_list",
    "client_for",
    "in_thread",
    "is_finished",
    "load_prices",
    "load_result_folder",
    "load_task_list",
    "open_trajectory",
    "read_trajectory",
    "register_family",
    "register_scheme",
    "result_folder",
    "run_episode",
    "run_task_list",
    "step_cost",
]
