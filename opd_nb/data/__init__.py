"""Data as users hold it: Bailian's OPD JSONL read, built, split, described and validated, and other shapes converted.

The user-facing path is ``opd_nb.data`` (README, tutorials): it re-exports the helpers users call
(:mod:`.jsonl`: ``to_rows``, ``split``, ``stats``, ``validate``, ...; :mod:`.conversion`: ``convert``).
"""

from __future__ import annotations

from opd_nb.data import jsonl
from opd_nb.data.conversion import convert
from opd_nb.data.jsonl import *  # noqa: F403 - the helpers users call, listed once (jsonl.__all__)

__all__ = ["convert"]
__all__ += jsonl.__all__
