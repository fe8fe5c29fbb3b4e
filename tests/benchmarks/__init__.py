"""Ratio benchmarks, measured in one run against the floor of the same work."""
