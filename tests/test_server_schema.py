"""Property-based run over the local control plane's own OpenAPI schema: no input produces a 500.

Seeded (the same cases on every run), every operation of the schema covered, and bounded: at most
``EXAMPLES`` generated cases per operation, with schemathesis's ``not_a_server_error`` check on each
answer, plus our own: a 4xx carries Bailian's error body, and a 405 names the allowed methods.
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.slow
EXAMPLES = 25  # per operation: ~45 operations x 25 cases, well under a minute
SEED = 20241201
BUDGET_S = 300


def test_no_server_errors_on_any_operation(local_server):
    schema = schemathesis.openapi.from_url(local_server.base_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every SDK endpoint plus the local-only ones
    documented = {f"{op.method.upper()} {op.path}" for op in operations}
    seen: dict[str, set[int]] = {}
    t0 = time.monotonic()

    for op in operations:
        _fuzz(op, seen)()
        assert time.monotonic() - t0 < BUDGET_S, f"the fuzz run is over its {BUDGET_S}s budget at {op.path}"

    assert set(seen) == documented, documented - set(seen)  # every operation was exercised


def _fuzz(op, seen: dict[str, set[int]]):  # noqa: ANN001, ANN202
    name = f"{op.method.upper()} {op.path}"

    @seed(SEED)
    @given(case=op.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(
            headers={"Authorization": "Bearer fuzz"}, checks=[not_a_server_error], timeout=30
        )
        seen.setdefault(name, set()).add(response.status_code)
        if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
            assert {"request_id", "code", "message"} <= set(response.json()), response.text[:300]
            assert len(response.content) < 4000, (name, len(response.content))
        if response.status_code == 405:
            assert response.headers.get("allow"), name

    return check
