"""The engine's training run as named parts: sampling, scoring, estimators, updates, evaluation,
checkpoints, records and the job's data, each exercised on its own with the bundled tiny pair.

The parts come from one real :class:`~opd_nb.engine.trainer.Trainer` (built once for the module),
so each test drives the same objects a job run uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opd_nb.engine import batch as bm  # noqa: E402
from opd_nb.engine import task  # noqa: E402
from opd_nb.engine.api import EngineError, EngineJob  # noqa: E402
from opd_nb.engine.models import default_pair  # noqa: E402

torch.set_num_threads(2)


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def _job(tmp: Path, algorithm: str, **hp) -> EngineJob:
    val = task.make_rows(6, seed=10_001)
    held = {r["messages"][-1]["content"] for r in val}
    student, teacher = default_pair()
    hyper = {"learning_rate": 1e-5, "lr_scheduler_type": "constant", "max_length": 48, "save_strategy": "no"}
    hyper.update({"batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 4, **hp})
    return EngineJob(
        job_id=f"parts-{algorithm}",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=_write(tmp / "train.jsonl", task.make_rows(12, seed=1, exclude=held)),
        validation_file=_write(tmp / "val.jsonl", val),
        algorithm=algorithm,
        output_dir=str(tmp / "out"),
        seed=3,
        hyper_parameters=hyper,
        device="cpu",
    )


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from opd_nb.engine.trainer import ListEvents, Trainer

    return Trainer(_job(tmp_path_factory.mktemp("parts"), "pg_opd"), ListEvents(), lambda: False)


# ---- sampling -------------------------------------------------------------------------------------


def test_prompts_are_left_padded_with_their_attention():
    from opd_nb.engine.sampling import pad_prompts

    ids, att = pad_prompts(torch, [[5, 6, 7], [8]], 0, "cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert att.tolist() == [[1, 1, 1], [0, 0, 1]]
    # the scorers' batches (agentic rollouts) pad by the same rule, and their masks with them
    b = bm.left_pad([[5, 6, 7], [8]], [[0, 1, 1], [1]], [0, 1], 0, "cpu")
    assert torch.equal(b.input_ids, ids) and torch.equal(b.attention_mask, att)
    assert b.target_mask.tolist() == [[False, True, True], [False, False, True]]
    with pytest.raises(ValueError, match="as long as its sequence"):
        bm.left_pad([[5, 6]], [[1]], [0], 0, "cpu")


def test_the_nucleus_keeps_the_likeliest_tokens_and_sampling_follows_the_distribution():
    from opd_nb.engine.sampling import filtered_probs, inverse_cdf_pick

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = filtered_probs(torch, logits, 1.0, 0.7)
    assert probs[0, 2:].tolist() == [0.0, 0.0]  # outside the 0.7 nucleus
    assert torch.allclose(probs[0, :2], torch.tensor([0.5, 0.3]))

    torch.manual_seed(0)
    many = logits.expand(20_000, 4)
    drawn = inverse_cdf_pick(torch, 1.0, 0.7, False, None, None, 1)(many)
    freq = torch.bincount(drawn, minlength=4).float() / len(drawn)
    assert freq[2:].sum() == 0  # a token of probability 0 is never drawn
    assert abs(float(freq[0]) - 0.5 / 0.8) < 0.02  # the nucleus renormalised by the draw


EDGE_TEMPERATURES = [0.0, 2**-1074, 2.2250738585072014e-308, 1e-45, 1e-6]  # each below the greedy floor
EDGE_TOP_PS = [2**-1074, 1e-45, 1.1754943508222875e-38, 1e-6]


def test_at_the_edges_of_their_ranges_the_pickers_are_greedy_never_nan():
    """A temperature or top-p below the floor is argmax in both pickers (subnormal ones made softmax
    NaN, or float32 flushed top-p to an empty nucleus: torch's multinomial raised); at the maximum
    temperature a pick is a real token; a row with NaN logits is its argmax, never handed to multinomial."""
    from opd_nb.engine.sampling import GREEDY_BELOW, inverse_cdf_pick, is_greedy, multinomial_pick
    from opd_nb.server.bodies import MAX_TEMPERATURE

    torch.manual_seed(0)
    logits = torch.randn(64, 300) * 8
    argmax = logits.argmax(-1)
    edges = [(t, 1.0) for t in EDGE_TEMPERATURES] + [(1.0, p) for p in EDGE_TOP_PS]
    for temperature, top_p in edges:
        assert is_greedy(temperature, top_p), (temperature, top_p)
        drawn = multinomial_pick(torch, temperature, top_p, torch.Generator().manual_seed(1))(logits)
        assert torch.equal(drawn, argmax), (temperature, top_p)
        draws = torch.rand(64, 1)
        assert torch.equal(inverse_cdf_pick(torch, temperature, top_p, True, None, draws, 1)(logits), argmax)
    assert not is_greedy(GREEDY_BELOW, 1.0) and not is_greedy(1.0, GREEDY_BELOW)
    for temperature, top_p in [
        (GREEDY_BELOW, 1.0),
        (MAX_TEMPERATURE, 1.0),
        (1.0, GREEDY_BELOW),
        (MAX_TEMPERATURE, 1e-5),
    ]:
        drawn = multinomial_pick(torch, temperature, top_p, torch.Generator().manual_seed(2))(logits)
        assert drawn.shape == (64,) and bool(((drawn >= 0) & (drawn < 300)).all())
    assert not torch.equal(multinomial_pick(torch, MAX_TEMPERATURE, 1.0, None)(logits), argmax)  # it samples
    broken = logits.clone()
    broken[3] = float("nan")
    broken[5, 7] = float("nan")
    drawn = multinomial_pick(torch, 1.0, 0.9, torch.Generator().manual_seed(3))(broken)
    assert int(drawn[5]) == int(broken[5].nan_to_num(-float("inf")).argmax())


def test_a_decode_at_a_subnormal_temperature_is_the_greedy_decode(trainer):
    """The agentic endpoint's and a deployment's decodes (``generate_ids``, ``Generator.decode``) at the
    edges answer the greedy tokens instead of raising or sampling garbage from NaN."""
    from opd_nb.engine import serving

    prompts = [r.prompt_ids for r in trainer.data.validation[:3]]
    greedy = trainer.sampler.generate_ids(prompts, temperature=0.0, top_p=1.0, max_new=8, seeds=[1, 2, 3])
    for temperature, top_p in [(2**-1074, 1.0), (1e-45, 0.8), (1.0, 2**-1074)]:
        got = trainer.sampler.generate_ids(
            prompts, temperature=temperature, top_p=top_p, max_new=8, seeds=[1, 2, 3]
        )
        assert got == greedy, (temperature, top_p)
    student, _ = default_pair()
    gen = serving.Generator(str(student), "cpu")
    served: list[list[int]] = []

    def on_step(nxt: list[int], logits) -> bool:
        served.append(nxt)
        return len(served) >= 6

    for temperature, top_p in [(0.0, 1.0), (2**-1074, 1.0), (1.0, 1e-45)]:
        served.clear()
        gen.decode([prompts[0]], temperature=temperature, top_p=top_p, seed=7, max_new=6, on_step=on_step)
        if temperature == 0.0:
            want = list(served)
        assert served == want, (temperature, top_p)


def test_row_draws_make_each_row_independent_of_its_batch():
    from opd_nb.engine.sampling import row_draws

    both = row_draws(torch, [11, 12], 6, "cpu")
    alone = row_draws(torch, [12], 4, "cpu")
    assert torch.equal(both[1, :4], alone[0])  # a shorter decode reads a prefix of the same stream
    assert not torch.equal(both[0], both[1])


def test_the_lean_and_the_transformers_decode_loops_agree(trainer):
    """The fallback loop (architectures the lean forward does not cover) decodes the same greedy tokens."""
    from opd_nb.engine.sampling import TorchSampler

    s = trainer.sampler
    assert isinstance(s, TorchSampler)
    assert s.lean is not None  # the bundled pair is Llama-family
    hf = TorchSampler(s.model, None, s.tok, s.eos_ids, s.max_total, s.device)
    prompts = [r.prompt_ids for r in trainer.data.validation]
    lean_rows = s.generate_ids(prompts, temperature=0.0, top_p=1.0, max_new=12)
    assert hf.generate_ids(prompts, temperature=0.0, top_p=1.0, max_new=12) == lean_rows
    assert any(len(ids) > 3 for ids, _ in lean_rows)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.3, 0.9)])
def test_the_lean_and_the_transformers_loops_sample_the_same_seeded_tokens(trainer, temperature, top_p):
    """Seeded sampling through the lean decode draws the tokens the ``transformers`` loop draws, row
    for row, with the shared prompt prefix run once and without: the lean forward's fused and cached
    steps change how the logits are computed, never which tokens come out."""
    from opd_nb.engine.sampling import TorchSampler, inverse_cdf_pick

    s = trainer.sampler
    assert isinstance(s, TorchSampler) and s.lean is not None
    hf = TorchSampler(s.model, None, s.tok, s.eos_ids, s.max_total, s.device)
    prompts = [r.prompt_ids for r in trainer.data.validation]
    seeds = list(range(100, 100 + len(prompts)))
    kw = dict(temperature=temperature, top_p=top_p, max_new=16, seeds=seeds)
    lean_rows = s.generate_ids(prompts, **kw)
    assert hf.generate_ids(prompts, **kw) == lean_rows
    ids, att = s.pad(prompts)
    torch.manual_seed(5)  # the training picker's global stream, through both loops and both prefix modes
    pick = lambda: inverse_cdf_pick(torch, temperature, top_p, False, None, None, 16)  # noqa: E731
    eos = torch.tensor(s.eos_ids)
    runs = []
    for sampler, share in ((s, True), (s, False), (hf, True)):
        torch.manual_seed(5)
        runs.append(sampler.decode(ids, att, 16, pick(), eos, share_prefix=share))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    assert len({tuple(ids) for ids, _ in lean_rows}) > 1 and any(len(ids) > 3 for ids, _ in lean_rows)


def test_native_rollouts_mark_the_completion_and_its_messages(trainer):
    rows = trainer.data.train[:2]
    b = trainer.source.sample(rows, 3, 1.0)
    assert b.group.tolist() == [0, 0, 0, 1, 1, 1]
    assert len(b.messages) == 6 and b.messages[4][-1] == {"role": "assistant", "content": b.texts[4]}
    assert b.messages[4][:-1] == rows[1].messages
    # trained tokens are the completion only: none in the prompt columns
    P = max(len(r.prompt_ids) for r in rows)
    assert not b.target_mask[:, :P].any() and b.target_mask[:, P:].any()


def test_a_deployment_decodes_with_the_trainers_sampler():
    """serving.Generator's greedy tokens are the training sampler's for the same model and prompt."""
    from opd_nb.engine import serving
    from opd_nb.engine.data import template_ids
    from opd_nb.engine.sampling import TorchSampler

    student, _ = default_pair()
    gen = serving.Generator(str(student), "cpu")
    assert isinstance(gen.sampler, TorchSampler)
    prompt = template_ids(
        gen.tok, [{"role": "user", "content": "Sort these digits: 3 1 2"}], add_generation_prompt=True
    )
    served: list[int] = []

    def on_step(nxt: list[int], logits) -> bool:
        served.append(nxt[0])
        return nxt[0] in gen.eos

    gen.decode([prompt], temperature=0.0, top_p=1.0, seed=None, max_new=16, on_step=on_step)
    sampled, _ = gen.sampler.generate_ids([prompt], temperature=0.0, top_p=1.0, max_new=16)[0]
    assert served == sampled and len(served) > 3


# ---- scoring, estimators, updates -----------------------------------------------------------------


def test_the_teacher_scores_in_chunks_like_one_pass(trainer):
    from opd_nb.engine.scoring import TeacherScorer

    b = trainer.source.sample(trainer.data.train[:2], 2, 1.0)
    t = trainer.teacher_scorer
    whole = t.score(b, b.window)
    tiny = TeacherScorer(t.teacher, t.lean, b.input_ids.shape[1], logprobs=True)  # one row per forward
    assert whole.shape == b.target_mask[:, -b.window :].shape
    assert torch.allclose(tiny.score(b, b.window), whole, atol=1e-5)
    hidden = t.score(b, b.window, logprobs=False)
    assert hidden.shape[:2] == whole.shape and hidden.shape[2] == t.teacher.config.hidden_size


def test_the_estimator_is_picked_from_the_plan(trainer):
    from opd_nb.engine.estimators import Gkd, PgOpd, make_estimator

    m = trainer.models
    pg = make_estimator(trainer.plan, m.student, m.teacher)
    gkd = make_estimator(trainer.plan.model_copy(update={"estimator": "gkd"}), m.student, m.teacher)
    assert isinstance(pg, PgOpd) and pg.teacher_logprobs and pg.needs_logprobs(False)
    assert isinstance(gkd, Gkd) and not gkd.teacher_logprobs
    assert not gkd.needs_logprobs(False) and gkd.needs_logprobs(True)  # log-probs only for a task reward


def _mini_batch(trainer):
    """A whole-batch update's inputs from real rollouts, and fresh records -> (fields, records)."""
    from opd_nb.engine.batch import targets_window
    from opd_nb.engine.estimators import Records

    b = trainer.source.sample(trainer.data.train[:2], 2, 1.0)
    w = b.window
    ids, tm, _ = targets_window(b, w)
    h, lp, ent = trainer.student_scorer.logprobs(b, w, entropy=True)
    zeros = torch.zeros(tm.shape)
    rec = Records(zeros, zeros.clone(), zeros.clone(), frozen_logprobs=False, frozen_entropy=False)
    fields = dict(
        idx=torch.arange(len(b)), whole=True, h=h, lp=lp, lp_old=lp.detach(), ent=ent, ids=ids, tm=tm, v=tm
    )
    return fields, rec


def test_pg_opd_has_nothing_to_learn_from_a_teacher_that_agrees(trainer):
    from opd_nb.engine.estimators import MiniBatch, PgOpd

    kw, rec = _mini_batch(trainer)
    teacher = kw["lp_old"]  # the teacher's log-probs are the student's own
    m = trainer.models
    loss, extra, k1_sum = PgOpd(trainer.plan, m.student, m.teacher).loss(
        MiniBatch(teacher=teacher, at=None, **kw), rec
    )
    assert k1_sum == 0.0 and float(loss.detach()) == 0.0
    assert set(extra) == {"actor/pg_clipfrac", "actor/ppo_kl"}
    assert rec.student is kw["lp_old"]  # one update: the pass is the sampling policy's record


def test_gkd_reverse_kl_is_zero_against_itself_and_fills_the_records(trainer):
    from opd_nb.engine.estimators import Gkd, MiniBatch

    m = trainer.models
    kw, rec = _mini_batch(trainer)
    t_h = kw["h"].detach()  # the teacher is the student itself
    kw.update(lp=None, lp_old=None, ent=None)
    loss, extra, kl_sum = Gkd(trainer.plan, m.student, m.student).loss(
        MiniBatch(teacher=t_h, at=None, **kw), rec
    )
    assert abs(kl_sum) < 1e-4 and abs(float(loss.detach())) < 1e-5 and extra == {}
    tm = kw["tm"]
    assert torch.allclose(rec.teacher[tm], rec.student[tm], atol=1e-5)  # the same model on both sides
    assert (rec.teacher[tm] < 0).all() and (rec.teacher[~tm] == 0).all()  # only trained tokens are filled
    assert (rec.entropy[tm] > 0).all()


def test_an_update_steps_the_student_and_reports_its_diagnostics(trainer):
    from opd_nb.engine.estimators import PgOpd
    from opd_nb.engine.updates import Updater

    b = trainer.source.sample(trainer.data.train[:2], 2, 1.0)
    t_vals = trainer.teacher_scorer.score(b, b.window)
    plan = trainer.plan.model_copy(update={"ppo_mini_batch_size": 2})  # two updates: frozen log-probs
    up = Updater(
        trainer.student_scorer, PgOpd(plan, trainer.models.student, trainer.models.teacher), plan, 10
    )
    before = [q.detach().clone() for q in trainer.models.student.parameters()]
    with torch.no_grad():  # the lean forward's no-grad weight cache, filled before the update
        h_before = trainer.models.s_lean.hidden_window(
            b.input_ids, b.attention_mask, b.position_ids, b.window, 0
        )
    metrics: dict = {}
    scores = up.update(b, t_vals, None, b.window, metrics, 0)
    after = list(trainer.models.student.parameters())
    assert any(not torch.equal(x, y) for x, y in zip(before, after, strict=True))
    # AdamW's fused kernel bumps no version counter: the no-grad forward still sees the new weights
    with torch.no_grad():
        h_after = trainer.models.s_lean.hidden_window(
            b.input_ids, b.attention_mask, b.position_ids, b.window, 0
        )
        ref = bm.hidden_window(trainer.models.student, b, b.window)
    tm = b.target_mask[:, -b.window :]  # the trained tokens' states (padding's differ by design)
    assert not torch.allclose(h_before[tm], h_after[tm])
    assert torch.allclose(h_after[tm], ref[tm], rtol=1e-4, atol=1e-4)
    assert {
        "actor/distillation/loss",
        "actor/grad_norm",
        "actor/entropy",
        "trace/distillation/teacher_kl",
    } <= set(metrics)
    assert torch.equal(scores.teacher, t_vals) and scores.student[scores.mask].lt(0).all()


# ---- evaluation, records, checkpoints, data ---------------------------------------------------------


def test_evaluation_answers_every_validation_prompt_and_records_them(trainer):
    from opd_nb.engine import rollouts

    assert trainer.recorder.enabled
    out = trainer.source.evaluate(trainer.data.validation, 0, trainer.recorder)
    assert 0.0 <= out["validation/accuracy"] <= 1.0 and "timing_s/validation_record" in out
    trainer.recorder.flush()
    recs = rollouts.read_rollouts(trainer.out, 0, "validation")
    assert len(recs) == len(trainer.data.validation)


def test_turns_keep_trained_tokens_and_teacher_scores_only_where_scored():
    from opd_nb.engine.native.records import turns
    from opd_nb.engine.scoring import TokenScores

    s = TokenScores(
        ids=torch.tensor([[1, 2, 3], [4, 5, 6]]),
        mask=torch.tensor([[False, True, True], [True, True, False]]),
        valid=torch.tensor([[False, True, False], [True, True, False]]),
        student=torch.tensor([[-0.1, -0.2, -0.3], [-0.4, -0.5, -0.6]]),
        teacher=torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]]),
    )
    got = turns(s, [0])
    assert list(got) == [0]
    assert got[0].ids == [2, 3] and got[0].teacher == [-2.0, None]
    assert got[0].student == pytest.approx([-0.2, -0.3])
    assert turns(s, []) == {}


def test_checkpoints_keep_the_newest_and_resume_the_rngs(trainer, tmp_path):
    from opd_nb.engine.checkpoints import STATE_FILE, Checkpoints

    plan = trainer.plan.model_copy(update={"save_total_limit": 1, "save_strategy": "steps", "save_steps": 2})
    ck = Checkpoints(
        tmp_path,
        trainer.job,
        plan,
        trainer.models,
        trainer.updater,
        trainer.data,
        trainer.events,
        trainer.log,
    )
    assert [ck.due(s, False) for s in (1, 2, 3, 4)] == [False, True, False, True]
    ck.save(2, 0, 8, {"step": 2.0})
    path = Path(ck.save(4, 1, 0, {"step": 4.0}))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint-4"]
    assert (path / STATE_FILE).is_file() and (path / "config.json").is_file()
    expected = torch.rand(3)
    got = ck.load(path)
    assert torch.equal(torch.rand(3), expected)  # the torch RNG is back where the checkpoint left it
    assert (got.step, got.epoch, got.cursor, got.metrics_tail) == (4, 1, 0, {"step": 4.0})
    with pytest.raises(EngineError, match="no trainer_state.pt"):
        ck.load(tmp_path)
    assert (Path(ck.publish()) / "model.safetensors").is_file()


def test_each_epoch_has_its_own_fixed_order(trainer):
    d = trainer.data
    first = d.epoch_order(0)
    assert sorted(first) == list(range(len(d.train))) and d.epoch_order(0) == first
    assert d.epoch_order(1) != first
    assert d.steps_per_epoch == -(-len(d.train) // trainer.plan.batch_size)


def test_the_run_gives_its_rollout_source_parts_not_itself(trainer):
    """A job without a rollout function gets native rollouts; the source holds the run's parts (its
    sampler, scorer, log) and no reference to the trainer, and offers what the loop asks of it."""
    from dataclasses import fields

    from opd_nb.engine.native.source import NativeRollouts
    from opd_nb.engine.rollout_source import RolloutParts, RolloutSource

    src = trainer.source
    assert isinstance(src, NativeRollouts)
    assert src.parts.sampler is trainer.sampler and src.parts.job is trainer.job
    assert all(getattr(src.parts, f.name) is not trainer for f in fields(RolloutParts))
    wanted = {k for k, v in vars(RolloutSource).items() if callable(v) and not k.startswith("_")}
    assert wanted == {"collect", "evaluate", "close"}
    assert all(callable(getattr(src, k)) for k in wanted)
