"""The package version: the one place it is set (pyproject reads it; the wheel carries it)."""

__version__ = "0.1.0"
