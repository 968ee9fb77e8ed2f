"""What a traced function server sends: the SDK's spans of each call, and nothing opd serve would drop.

FastAPI (>= 0.165) traces every request natively once a tracer provider exists, so the SDK's app
sent three HTTP spans per call beside its own two (60% of a reward job's spans, none tied to a
sample, all dropped on arrival) and each call took ~4x as long (bench/tracing_overhead.py). The
template's reward function runs in the real SDK server, exporting to a loopback OTLP collector.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from otlp_receiver import OtlpReceiver

from opd_nb.engine.keepalive import KeptConnections
from opd_nb.functions import reward_call
from opd_nb.functions.server import FunctionServer
from opd_nb.server.tracing.env import ENDPOINT_ENV, TOKEN_ENV, function_env
from opd_nb.traces.ids import of_attributes
from opd_nb.workspace.new import create

pytestmark = pytest.mark.slow
CALLS = 6


def _attrs(span) -> dict:  # noqa: ANN001
    return {kv.key: kv.value.string_value for kv in span.attributes}


def test_a_traced_function_server_sends_only_the_sdks_spans_of_each_call(tmp_path: Path) -> None:
    ws = Path(create("reward", tmp_path / "ws").path)
    receiver = OtlpReceiver()
    env = function_env({ENDPOINT_ENV: receiver.url + "/v1/traces", TOKEN_ENV: "t"}, "opd test reward")
    msgs = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
    try:
        with FunctionServer.start(ws, "reward", "functions/reward/reward.py:RewardProcessor", env=env) as fs:
            conns = KeptConnections(fs.url)
            for i in range(CALLS):
                req = reward_call.reward_request(
                    msgs, {}, "4", job_id="ft-1", sample_id=f"step 3-{i}", rollout_id="0"
                )
                [outcome] = reward_call.call(conns.post, req, 60, url=fs.url)
                assert outcome.error is None, outcome.error
            conns.close()
        deadline = time.monotonic() + 30  # a stopping server sends what it traced (flush at shutdown)
        while len(receiver.spans) < 2 * CALLS and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        receiver.close()
    names = sorted(s.name for s in receiver.spans)
    assert names == sorted(["invoke_agentic_rl", "invoke_reward RewardProcessor"] * CALLS), names
    groups = sorted(ref.group for s in receiver.spans if (ref := of_attributes(_attrs(s))) is not None)
    assert groups == sorted(list(range(CALLS)) * 2), groups  # every span is tied to its sample
