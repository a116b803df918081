"""Helpers shared by the tests of several layers (``tests/`` is on sys.path: the root
conftest lives there)."""
