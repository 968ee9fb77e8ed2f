"""`POST /fine-tunes` checks hyper-parameters through the spec's table and the engine's rules (issue 28).

A job the engine cannot run used to be stored PENDING and fail once its worker started; a NaN learning
rate was stored as null and silently trained at the default.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow
BASE = {
    "model": "qwen3-8b",
    "training_type": "pg_opd",
    "teacher_model": "qwen3-max",
    "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": "file-none"}],
}


def _submit(api, hp: dict | str):  # noqa: ANN001, ANN202
    hp_text = hp if isinstance(hp, str) else json.dumps(hp)
    raw = json.dumps(BASE)[:-1] + f', "hyper_parameters": {hp_text}}}'
    return api.post("/fine-tunes", content=raw, headers={"Content-Type": "application/json"})


BAD = [
    ({"n_epochs": "abc", "batch_size": -3}, ["hyper_parameters.n_epochs", "'abc'", "hyper_parameters.batch_size", "minimum 1"]),
    ({"batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 64}, ["ppo_mini_batch_size = 64", "4 x 2 = 8"]),
    ({"ppo_mini_batch_size": 2048}, ["ppo_mini_batch_size = 2048", "128 x 8"]),  # the defaults count too
    ('{"learning_rate": NaN}', ["hyper_parameters.learning_rate", "finite"]),
    ({"learning_rate": "nan"}, ["hyper_parameters.learning_rate", "finite"]),
    ({"learning_rate": "-Infinity"}, ["hyper_parameters.learning_rate", "finite"]),
    ({"n_epochs": 1000}, ["hyper_parameters.n_epochs", "maximum 100"]),
    ({"lr_scheduler_type": "warmup"}, ["hyper_parameters.lr_scheduler_type", "cosine"]),
    ({"max_length": 512, "max_prompt_length": 600}, ["max_prompt_length = 600", "max_length = 512"]),
    ({"save_total_limit": 0}, ["hyper_parameters.save_total_limit"]),
]  # fmt: skip


@pytest.mark.parametrize("hp,needles", BAD, ids=[str(hp)[:40] for hp, _ in BAD])
def test_hyper_parameters_the_engine_cannot_run_are_a_400_at_submit(api, hp, needles):
    before = api.get("/fine-tunes", params={"page_size": 100}).json()["output"]["total"]
    resp = _submit(api, hp)
    assert resp.status_code == 400, resp.text[:300]
    body = resp.json()
    assert body["code"] == "InvalidParameter" and {"request_id", "message"} <= set(body)
    for needle in needles:
        assert needle in body["message"], (needle, body["message"])
    assert ("config.yaml" if isinstance(hp, dict) else "send a finite number") in body["message"]  # the fix
    assert api.get("/fine-tunes", params={"page_size": 100}).json()["output"]["total"] == before


@pytest.mark.parametrize(
    "hp",
    [
        {"learning_rate": "1e-6", "n_epochs": "2"},  # YAML reads 1e-6 as text; the cloud takes it
        {"algorithm": "gkd", "batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 8},
        {"a_key_the_service_ignores": [1, 2], "max_length": 64},
    ],
)
def test_hyper_parameters_the_engine_runs_pass_on_to_the_next_check(api, hp):
    resp = _submit(api, hp)
    assert resp.status_code == 400 and resp.json()["code"] == "FileNotFound", resp.text[:300]
