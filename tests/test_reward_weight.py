"""A meaningful 0 or empty list is kept, never replaced by a default through truthiness (issue 51).

A reward's weight counts as submitted: 0.0 weighs nothing, 0.5 half, an absent weight 1; and a sample's
`tools: []` offers the student no tools, where only an absent `tools` gets the template's example tools.

The weight travels from the job body (``rewards[i].weight``) through the stored job record to the engine's
endpoint, and the engine sums ``weight * score`` into ``trace/reward/mean``. A truthiness default
(``spec.weight or 1.0``) read 0.0 as 1.0; these tests follow the real path, body to mean.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from opd_nb.constants import TRAIN_REWARD_MEAN
from opd_nb.engine.rewards import Sample, _summarize  # pyright: ignore[reportPrivateUsage]
from opd_nb.functions.reward_call import CallOutcome
from opd_nb.server.bodies import FunctionRef
from opd_nb.server.store.job_record import JobFunction
from opd_nb.server.worker import reward_endpoint

CONSTANT = 0.5  # what the constant reward answers for every sample


def _endpoint(body: dict[str, object], name: str = "constant"):
    """A reward as the job body names it, stored as the record keeps it, and called as the worker sets it up."""
    ref = FunctionRef.model_validate({"reward_id": "rw-1", **body})
    spec = JobFunction.model_validate(
        JobFunction(
            entity_id="rw-1",
            kind="reward",
            name=name,
            processor="reward.Constant",
            code_dir="/nowhere",
            weight=ref.weight,
            timeout=ref.timeout,
            concurrency=ref.concurrency,
        ).model_dump(mode="json")  # the record crosses a process as JSON
    )
    return reward_endpoint(spec, "http://127.0.0.1:1")


def _mean(endpoints, scores: list[float]) -> float:
    samples = [
        Sample([{"role": "user", "content": "q"}], {}, group=0, sample_id=f"s{i}", rollout_id="r")
        for i in range(4)
    ]
    per_ep = [[CallOutcome(score=s) for _ in samples] for s in scores]
    result = _summarize(endpoints, samples, per_ep, where="step 1", log=None, job_id="ft-test")
    return result.metrics[TRAIN_REWARD_MEAN]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"weight": 0.0}, 0.0),
        ({"weight": 0}, 0.0),
        ({"weight": 0.5}, 0.25),
        ({"weight": 2.0}, 1.0),
        ({}, 0.5),  # absent: the default weight 1
        ({"weight": None}, 0.5),
    ],
    ids=["zero-float", "zero-int", "half", "double", "absent", "null"],
)
def test_weight_scales_the_reward_mean(body, expected):
    endpoint = _endpoint(body)
    assert _mean([endpoint], [CONSTANT]) == pytest.approx(expected)


def test_a_zero_weight_reward_beside_another_adds_nothing():
    muted = _endpoint({"weight": 0.0}, name="muted")
    main = _endpoint({"weight": 1.0}, name="main")
    assert _mean([muted, main], [CONSTANT, 1.0]) == pytest.approx(1.0)


def test_call_options_keep_what_was_sent():
    endpoint = _endpoint({"weight": 0.0, "timeout": 5, "concurrency": 2})
    assert (endpoint.weight, endpoint.timeout, endpoint.concurrency) == (0.0, 5.0, 2)


# ---------------------------------------------------------------- an empty list stays empty (the same family)


@pytest.fixture(scope="module")
def template_rollout(tmp_path_factory):
    """The agentic template's rollout class, imported from a generated workspace."""
    import importlib.util

    from opd_nb.workspace.new import create

    ws = Path(create("agentic", tmp_path_factory.mktemp("agentic") / "ws").path)
    spec = importlib.util.spec_from_file_location("i51_rollout", ws / "functions" / "rollout" / "rollout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("row_tools", "offered"), [([], False), (None, True)], ids=["empty", "absent"])
def test_a_samples_empty_tools_list_offers_no_tools(template_rollout, row_tools, offered):
    """A row's `tools: []` means "no tools"; only a row without `tools` gets the template's example tools."""
    import httpx
    from dashscope.finetune.reinforcement import RolloutInput

    sent: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        message = {"role": "assistant", "content": "done"}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}]})

    processor = template_rollout.RolloutProcessor()
    processor._client = lambda: httpx.AsyncClient(transport=httpx.MockTransport(answer))
    data = RolloutInput.model_validate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": row_tools,
            "model_resource": {
                "model_name": "student",
                "base_url": "http://student.invalid/v1",
                "api_key": "k",
            },
        }
    )
    out = asyncio.run(processor.process(data))
    assert out is not None and len(sent) == 1
    assert ("tools" in sent[0]) is offered, sent[0]
