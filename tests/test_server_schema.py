"""Property-based run over the local control plane's own OpenAPI schema: no input produces a 500."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow


def test_no_server_errors(local_server):
    schema = schemathesis.openapi.from_url(local_server.base_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every SDK endpoint plus the local-only ones
    seen: dict[str, int] = {}

    @given(data=st.data())
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(operations))
        case = data.draw(op.as_strategy())
        response = case.call(headers={"Authorization": "Bearer fuzz"}, timeout=30)
        seen[f"{op.method.upper()} {op.path}"] = response.status_code
        assert response.status_code < 500, (case.method, case.formatted_path, case.body, response.text[:500])
        if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
            assert {"request_id", "code", "message"} <= set(response.json()), response.text[:300]

    check()
    assert len(seen) >= len(operations) // 2  # the run reached most endpoints
