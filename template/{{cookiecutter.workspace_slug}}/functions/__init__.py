"""Functions this workspace registers with Bailian (the directory must be an importable package)."""
