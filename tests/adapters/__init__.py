"""Tests of the model adapters: providers, the client engine, retries, the registry."""
