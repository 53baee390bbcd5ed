"""The tests' rigs and builders, imported by the test modules (no test imports conftest or another
test module; conftest.py keeps only fixtures and hooks, which pytest hands the tests)."""
