"""The run report and the run manifest."""
