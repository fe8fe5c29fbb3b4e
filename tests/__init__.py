"""The osharm-core test suite."""
