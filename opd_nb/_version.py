"""The package's version, in a leaf that imports nothing: `pyproject.toml` reads it (hatch), so does `opd version`."""

__version__ = "0.1.0"
