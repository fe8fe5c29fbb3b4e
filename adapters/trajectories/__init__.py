"""Trajectories: our JSONL format written and read (`jsonl`), OS-Harm / OSWorld result folders
written and read (`osharm`), and replaying either (`replay`)."""

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
from adapters.trajectories.replay import ReplayClient, ReplayEnv

__all__ = [
    "ReplayClient",
    "ReplayEnv",
    "ResultWriter",
    "TaskInfo",
    "TrajectoryEntry",
    "TrajectoryFile",
    "TrajectoryRecorder",
    "load_result_folder",
    "open_trajectory",
    "read_trajectory",
    "result_folder",
]
