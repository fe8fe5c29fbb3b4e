"""Tests of the judge (`adapters.judge`) and its CLI commands."""
