"""nbval runs each tutorial cell as a test item; a training cell waits for its job (`.wait(timeout_s=1800)`).

pyproject's `timeout = 600` (pytest-timeout) is per item, so on a loaded machine (a CI runner running
the rest of the suite beside it) a training cell passed it while its job was still healthy and on its
way. Tutorial cells get the same limit as the waits inside them.
"""

from __future__ import annotations

import pytest

CELL_TIMEOUT_S = 1800  # the tutorials' own `.wait(timeout_s=...)`


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.timeout(CELL_TIMEOUT_S))
