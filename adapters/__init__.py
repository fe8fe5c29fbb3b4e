"""The edge of osharm-core: model clients, the PromptAgent facade, the CLI, trajectories."""
