"""The environment contract and the environments the library brings, by one name.

An environment is anything with OSWorld's `DesktopEnv` methods:
`reset(task_config=...) -> observation`, `step(action, pause) -> (observation,
reward, done, info)`, `evaluate() -> float | None` and `close()`; observations
are OSWorld observation dicts (`screenshot` PNG bytes, `accessibility_tree`
XML text). `ReplayEnv` is one; an OSWorld `DesktopEnv` you already have is one
once wrapped in `DesktopEnvAdapter` (which checks what it returns);
`OSWorldServerEnv` drives a VM through the HTTP server inside it; `in_thread`
gives any of them the async form, each call in a worker thread, so an asyncio
runner can drive many at once.

The names live in `env_contract` (`Env`, `AsyncEnv`, `in_thread`,
`ENV_EXECUTOR`), `desktop_env` (`DesktopEnvAdapter`) and `vm_env`
(`OSWorldServerEnv`); this module gives them all, as it always has.
"""

from __future__ import annotations

from adapters.runs.desktop_env import DEFAULT_SETTLE, DesktopEnvAdapter
from adapters.runs.env_contract import (
    ENV_EXECUTOR,
    AsyncEnv,
    Env,
    Observation,
    StepResult,
    in_thread,
)
from adapters.runs.vm_answers import (
    MAX_ANSWER_DEPTH,
    MAX_INFO_FIELDS,
    MAX_INFO_TEXT,
    MAX_SCREEN_SIDE,
)
from adapters.runs.vm_env import (
    DEFAULT_MAX_RECORDING_BYTES,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_VM_RETRIES,
    DEFAULT_VM_RETRY_WAIT,
    MAX_TIMEOUT,
    PYAUTOGUI_PREFIX,
    READY_POLL,
    READY_POLL_TIMEOUT,
    OSWorldServerEnv,
)
from adapters.runs.vm_http import DEFAULT_MAX_ANSWER_BYTES
from adapters.runs.vm_setup import DEFAULT_CLIENT_PASSWORD, DEFAULT_MAX_DOWNLOAD_BYTES

__all__ = [
    "DEFAULT_CLIENT_PASSWORD",
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_DOWNLOAD_BYTES",
    "DEFAULT_MAX_RECORDING_BYTES",
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_SETTLE",
    "DEFAULT_VM_RETRIES",
    "DEFAULT_VM_RETRY_WAIT",
    "ENV_EXECUTOR",
    "MAX_ANSWER_DEPTH",
    "MAX_INFO_FIELDS",
    "MAX_INFO_TEXT",
    "MAX_SCREEN_SIDE",
    "MAX_TIMEOUT",
    "PYAUTOGUI_PREFIX",
    "READY_POLL",
    "READY_POLL_TIMEOUT",
    "AsyncEnv",
    "DesktopEnvAdapter",
    "Env",
    "OSWorldServerEnv",
    "Observation",
    "StepResult",
    "in_thread",
]
