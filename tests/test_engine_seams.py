"""The engine's seams: a new estimator or sampler is one class plus one registry line.

A toy third estimator and a toy generation backend, each defined here and registered with one line,
run a real (tiny) training job through the trainer; neither becomes an option users can pick, since
the names users may write are the core's (``opd_nb.constants``), not the engine registry's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opd_nb.constants import CLOUD_ESTIMATOR, LOCAL_ESTIMATORS, LOSS  # noqa: E402
from opd_nb.engine import estimators, hparams, samplers, task  # noqa: E402
from opd_nb.engine.api import EngineError, EngineJob  # noqa: E402
from opd_nb.engine.estimators import MiniBatch, Records  # noqa: E402
from opd_nb.engine.models import default_pair  # noqa: E402
from opd_nb.engine.sampling import TorchSampler  # noqa: E402
from opd_nb.spec.hyperparams import PARAMS_BY_NAME, value_problem  # noqa: E402

torch.set_num_threads(2)


class DirectK1:
    """A toy estimator: the mean of log pi_s - log pi_t on the teacher-scored tokens, minimised directly
    (no policy-gradient wrapper). It keeps each update's distillation sum to compare with the metrics."""

    teacher_logprobs = True
    pass_entropy = True
    sums: list[tuple[float, float]] = []  # per update: (distillation sum, teacher-scored tokens)

    def __init__(self, plan: object, student: object, teacher: object):  # the registry's constructor
        self.plan = plan

    def needs_logprobs(self, has_task: bool) -> bool:
        return True

    def teacher_record(self, t_vals, zeros):
        return t_vals

    def loss(self, mb: MiniBatch, rec: Records):
        if not rec.frozen_logprobs:
            rec.student, rec.entropy = mb.lp_old, mb.ent
        k1 = (mb.lp - mb.teacher) * mb.v
        d = float(k1.detach().sum())
        DirectK1.sums.append((d, float(mb.v.sum())))
        return k1.sum() / mb.v.sum().clamp(min=1), {}, d


class Tallying:
    """A toy generation backend: the in-process decode loop behind it, every request it served counted."""

    def __init__(self, models: object, max_total: int):  # the registry's constructor
        self.inner = TorchSampler.for_student(models, max_total)
        self.served: list[tuple[str, int]] = []

    def generate(self, prompt_ids, groups, *, temperature, logprobs=False):
        self.served.append(("generate", len(prompt_ids)))
        return self.inner.generate(prompt_ids, groups, temperature=temperature, logprobs=logprobs)

    def generate_ids(self, prompt_ids, *, temperature, top_p, max_new, seeds=None):
        self.served.append(("generate_ids", len(prompt_ids)))
        return self.inner.generate_ids(
            prompt_ids, temperature=temperature, top_p=top_p, max_new=max_new, seeds=seeds
        )


def _job(tmp: Path, **kw) -> EngineJob:
    def write(name: str, rows: list[dict]) -> str:
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp / name)

    val = task.make_rows(4, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val}
    student, teacher = default_pair()
    return EngineJob(
        job_id="seams",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=write("train.jsonl", task.make_rows(8, seed=1, exclude=held)),
        validation_file=write("val.jsonl", val),
        output_dir=str(tmp / "out"),
        seed=5,
        device="cpu",
        hyper_parameters={
            "batch_size": 4,
            "n_rollouts": 2,
            "ppo_mini_batch_size": 4,  # two updates per step
            "max_length": 48,
            "eval_steps": 2,
            "save_strategy": "no",
            "lr_scheduler_type": "constant",
        },
        **kw,
    )


@pytest.mark.slow
def test_a_third_estimator_and_a_sampler_registered_in_one_line_each_train_a_job(tmp_path, monkeypatch):
    from opd_nb.engine.trainer import ListEvents, Trainer

    monkeypatch.setitem(estimators.REGISTRY, "direct_k1", DirectK1)  # the estimator's one line
    monkeypatch.setitem(samplers.SAMPLERS, "tallying", Tallying)  # the sampler's one line
    DirectK1.sums = []
    ev = ListEvents()
    trainer = Trainer(_job(tmp_path, algorithm="direct_k1", sampler="tallying"), ev, lambda: False)
    assert isinstance(trainer.updater.estimator, DirectK1) and isinstance(trainer.sampler, Tallying)
    before = [q.detach().clone() for q in trainer.models.student.parameters()]
    result = trainer.run()

    assert result.steps == 2 and "estimator direct_k1" in ev.text
    rows = [r for r in ev.rows if r["step"] > 0]
    assert len(DirectK1.sums) == 2 * 2  # two steps of two updates each ran the toy's loss
    for r, updates in zip(rows, (DirectK1.sums[:2], DirectK1.sums[2:]), strict=True):
        # the step's reported loss is the toy's: its distillation sums over its teacher-scored tokens
        assert r[LOSS] == pytest.approx(sum(d for d, _ in updates) / sum(n for _, n in updates))
        assert r["actor/grad_norm"] > 0
    after = list(trainer.models.student.parameters())
    assert any(not torch.equal(x, y) for x, y in zip(before, after, strict=True))  # it trained
    # the rollouts (8 per step) and each validation's greedy answers came from the toy backend
    assert trainer.sampler.served.count(("generate", 8)) == 2
    assert trainer.sampler.served.count(("generate", 4)) == 2  # before training and at step 2
    assert "validation/accuracy" in ev.rows[-1]

    # registered in the engine only: no config a user writes can name it
    assert value_problem("algorithm", "direct_k1") is not None
    monkeypatch.undo()
    with pytest.raises(EngineError, match="unknown estimator 'direct_k1'"):
        hparams.resolve({}, student_params=1, estimator="direct_k1")


def test_every_estimator_users_may_name_has_a_class_and_every_list_derives_from_one_place():
    assert {CLOUD_ESTIMATOR, *LOCAL_ESTIMATORS} <= set(estimators.REGISTRY)
    assert PARAMS_BY_NAME["algorithm"].local_choices == list(LOCAL_ESTIMATORS)
    for name in LOCAL_ESTIMATORS:
        assert value_problem("algorithm", name) is None  # opd check --target local / opd serve accept it
        assert value_problem("algorithm", name, local=False) is not None  # Bailian does not
        assert hparams.resolve({"algorithm": name}, student_params=1).estimator == name
    with pytest.raises(EngineError) as info:
        hparams.resolve({}, student_params=1, estimator="ppo")
    assert all(n in str(info.value) for n in estimators.REGISTRY)  # the error lists what is registered


def test_a_name_the_core_offers_without_a_class_stops_the_engine_at_import(monkeypatch):
    monkeypatch.setattr(estimators, "LOCAL_ESTIMATORS", (*LOCAL_ESTIMATORS, "forgotten"))
    with pytest.raises(ImportError, match="forgotten.*add the class and its registry line"):
        estimators._check_registry()


def test_an_unknown_sampler_is_refused_with_the_registered_names(tmp_path):
    from opd_nb.engine.trainer import ListEvents, Trainer

    with pytest.raises(EngineError, match="unknown sampler 'vllm'; use one of torch"):
        Trainer(_job(tmp_path, sampler="vllm"), ListEvents(), lambda: False)
