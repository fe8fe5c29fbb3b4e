"""Runs: the environment contract, OSWorld / OS-Harm task lists resumed where a crash left them,
progress and summaries (`adapters.runs.ray_runner` spreads them over a Ray cluster)."""

from adapters.runs.computer_13 import computer_13_code
from adapters.runs.environments import (
    AsyncEnv,
    DesktopEnvAdapter,
    Env,
    OSWorldServerEnv,
    in_thread,
)
from adapters.runs.episode import Episode, arun_episode, run_episode
from adapters.runs.locks import take_lock
from adapters.runs.progress import Progress, RunListener, RunResult, RunSummary
from adapters.runs.screening import Screening
from adapters.runs.tasks import (
    Layout,
    OsworldTask,
    ResultFolders,
    RunSettings,
    TaskOutcome,
    Trajectories,
    arun_task,
    arun_task_list,
    is_finished,
    load_task_list,
    run_task_list,
)
from adapters.runs.vm_revert import RevertCommand
from adapters.runs.vm_setup import ServerSetup, SetupStep, plan_setup

__all__ = [
    "AsyncEnv",
    "DesktopEnvAdapter",
    "Env",
    "Episode",
    "Layout",
    "OSWorldServerEnv",
    "OsworldTask",
    "Progress",
    "ResultFolders",
    "RevertCommand",
    "RunListener",
    "RunResult",
    "RunSettings",
    "RunSummary",
    "Screening",
    "ServerSetup",
    "SetupStep",
    "TaskOutcome",
    "Trajectories",
    "arun_episode",
    "arun_task",
    "arun_task_list",
    "computer_13_code",
    "in_thread",
    "is_finished",
    "load_task_list",
    "plan_setup",
    "run_episode",
    "run_task_list",
    "take_lock",
]
