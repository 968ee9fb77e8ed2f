"""The behaviour every typed result shares: one JSON shape for `--json` and for callers.

Commands return typed results (pydantic models or dataclasses); the CLI prints them and the
``%opd`` magic returns them for Jupyter to render. A result without ``__rich__`` is printed as its
``str()`` (never read as rich markup, so ``functions[0]`` or a path with brackets survives); one
with a table defines ``__rich__``. A result overrides ``to_payload`` when its JSON shape is not
simply its fields.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


class ResultMixin:
    """``to_payload()`` (JSON-ready data) and ``to_json()`` (its text, indented, UTF-8 kept)."""

    def to_payload(self) -> Any:
        dump = getattr(self, "model_dump", None)
        if callable(dump):
            return dump(mode="json")
        if dataclasses.is_dataclass(self):
            return dataclasses.asdict(self)
        raise TypeError(f"{type(self).__name__} must define to_payload()")

    def to_json(self) -> str:
        return json.dumps(self.to_payload(), indent=2, ensure_ascii=False, default=str)
