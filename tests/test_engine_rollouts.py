"""Rollout records and the step diagnostics (actor/entropy, teacher_kl, zero_variance_groups).

Fast tests cover the torch-free reader and helpers (token texts that join for byte-level and
SentencePiece-style tokenizers, the fair sample, atomic files and retention); slow ones run the
bundled tiny pair and read what the engine wrote, cross-checking the recorded log-probs against
the metrics the step computed from the same tensors.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opd_nb.engine import rollouts

REWARDS = textwrap.dedent("""
    import re

    from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput


    class Exact(AbstractRewardProcessor):
        async def process(self, input_data: RewardInput) -> RewardOutput:
            msgs = input_data.agent_output.messages or []
            text = (msgs[-1].get("content") or "") if msgs else ""
            text = re.sub(r"<think>.*?</think>", "", text, flags=re.S).strip()
            ok = float(text == str(input_data.ground_truth))
            return RewardOutput(reward=Reward(reward_score=ok, reward_metrics={"exact": ok, "chars": float(len(text))}))
""")

ROLLOUT = textwrap.dedent("""
    import httpx

    from dashscope.finetune.reinforcement import AbstractRolloutProcessor, AgentOutput, RolloutInput, RolloutOutput


    class TwoTurns(AbstractRolloutProcessor):
        async def process(self, input_data: RolloutInput) -> RolloutOutput:
            mr = input_data.model_resource
            msgs = [dict(m) for m in input_data.messages]
            headers = {"Authorization": f"Bearer {mr.api_key.get_secret_value()}"}
            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                for turn in range(2):
                    r = await client.post(f"{mr.base_url}/chat/completions", headers=headers, json={
                        "model": mr.model_name, "messages": msgs, "temperature": 1.0, "max_tokens": 24})
                    r.raise_for_status()
                    msgs.append(r.json()["choices"][0]["message"])
                    if turn == 0:
                        msgs.append({"role": "user", "content": input_data.messages[-1]["content"]})
            return RolloutOutput(agent_output=AgentOutput(messages=msgs, rollout_extra=input_data.rollout_extra))
""")


# ---- fast: torch-free helpers and the reader ------------------------------------------------------


def test_reader_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from opd_nb.engine import rollouts\n"
        "print(rollouts.recorded_steps('/nonexistent'), rollouts.read_rollouts('/nonexistent'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "[]"]


def _byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<e>"] = len(vocab)
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # every byte its own token: multi-byte chars split
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<e>")


def _sentencepiece_like_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pieces = [("<unk>", 0.0), ("<e>", 0.0), ("▁a", -1.0), ("▁the", -1.0), ("▁cat", -1.0), ("s", -2.0)]
    t = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=False))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()  # a token decoded alone loses its leading space
    return PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<e>", unk_token="<unk>")


@pytest.mark.parametrize(
    "make,text,want",
    [
        (
            _byte_level_tokenizer,
            "héllo 日本",
            ["h", "", "é", "l", "l", "o", " ", "", "", "日", "", "", "本", ""],
        ),
        (_sentencepiece_like_tokenizer, "a the cats", ["a", " the", " cat", "s", ""]),
    ],
)
def test_token_texts_join_exactly_where_single_token_decodes_do_not(make, text, want):
    tok = make()
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert "".join(tok.decode([i]) for i in ids) != text  # the naive per-token decode does not join up
    texts, full = rollouts.TokenTexts(tok)(ids)
    assert full == text
    assert "".join(texts) == text
    assert texts == want


def test_fair_sample_is_round_robin_over_groups_and_rotates_with_the_step():
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    first = rollouts.fair_sample(groups, 6, step=0)
    assert [groups[i] for i in first] == [0, 1, 2, 3, 0, 1]  # every prompt once before any twice
    assert first == [0, 3, 6, 9, 1, 4]
    assert rollouts.fair_sample(groups, 6, step=0) == first  # deterministic
    later = rollouts.fair_sample(groups, 2, step=1)
    assert [groups[i] for i in later] == [2, 3]  # the next step starts where this one stopped
    assert sorted(rollouts.fair_sample(groups, 100, step=3)) == list(range(12))  # never more than there is
    assert rollouts.fair_sample(groups, 0, step=0) == []
    assert rollouts.ranks([5, 5, 7, 5, 7]) == [0, 1, 0, 2, 1]


def _rollout(text_ids: list[int], group: int = 0) -> rollouts.Rollout:
    turn = rollouts.Turn(ids=text_ids, student=[-0.5] * len(text_ids), teacher=[-0.25] * len(text_ids))
    return rollouts.Rollout(group=group, sample=0, messages=[{"role": "user", "content": "x"}], turns=[turn])


def test_files_are_atomic_and_retention_keeps_recent_and_evaluation_steps(tmp_path, monkeypatch):
    from opd_nb.engine.models import default_pair, load_tokenizer

    tok = load_tokenizer(default_pair()[0])
    monkeypatch.delenv(rollouts.KEEP_ENV, raising=False)
    monkeypatch.delenv(rollouts.PER_STEP_ENV, raising=False)
    default = rollouts.Recorder(tmp_path, tok)
    assert (default.keep, default.per_step) == (50, 16)
    monkeypatch.setenv(rollouts.KEEP_ENV, "3")
    rec = rollouts.Recorder(tmp_path, tok)
    ids = tok("123", add_special_tokens=False)["input_ids"]
    for step in range(1, 9):
        rec.write("train", step, [_rollout(ids, g) for g in range(2)])
        if step in (2, 4):
            rec.write("validation", step, [_rollout(ids)])
    rec.flush()  # written by the recorder's background thread
    assert rollouts.recorded_steps(tmp_path, "train") == [2, 4, 6, 7, 8]
    assert rollouts.recorded_steps(tmp_path, "validation") == [2, 4]
    assert rollouts.recorded_steps(tmp_path) == [2, 4, 6, 7, 8]
    assert not [
        p for p in (tmp_path / "rollouts").iterdir() if not p.name.endswith(".json.gz")
    ]  # no temp files
    latest = rollouts.read_rollouts(tmp_path)
    assert [(r["kind"], r["step"], r["group"]) for r in latest] == [("train", 8, 0), ("train", 8, 1)]
    assert latest[0]["completion"] == "123" and "".join(t["text"] for t in latest[0]["tokens"]) == "123"
    both = rollouts.read_rollouts(tmp_path, step=4)
    assert [r["kind"] for r in both] == ["train", "train", "validation"]
    assert [r["kind"] for r in rollouts.read_rollouts(tmp_path, step=4, kind="validation")] == ["validation"]
    assert len(rollouts.read_rollouts(tmp_path, step=4, limit=1)) == 1
    assert rollouts.read_rollouts(tmp_path, step=5) == []  # removed by retention
    assert rollouts.read_rollouts(tmp_path, kind="validation")[0]["step"] == 4
    raw = json.loads(
        __import__("gzip").decompress((tmp_path / "rollouts" / "train-000008.json.gz").read_bytes())
    )
    assert raw["format"] == rollouts.FORMAT and raw["step"] == 8 and raw["kind"] == "train"
    with pytest.raises(ValueError, match="kind"):
        rollouts.read_rollouts(tmp_path, kind="eval")
    with pytest.raises(ValueError, match="limit"):
        rollouts.read_rollouts(tmp_path, limit=-1)
    rec.start(4)  # a run resumed at step 4 drops the abandoned later steps
    assert rollouts.recorded_steps(tmp_path) == [2, 4]
    rec.close()


def test_a_failed_write_turns_recording_off_without_failing(tmp_path):
    from opd_nb.engine.models import default_pair, load_tokenizer

    (tmp_path / "rollouts").write_text("not a directory")  # every write will fail
    logs: list[tuple[str, str]] = []
    rec = rollouts.Recorder(tmp_path, load_tokenizer(default_pair()[0]), lambda m, lvl: logs.append((lvl, m)))
    rec.write("train", 1, [_rollout([30])])
    rec.flush()
    assert rec.enabled and not logs
    rec.write("train", 2, [_rollout([30])])  # the caller hears of it on its own thread, once
    rec.write("train", 3, [_rollout([30])])
    rec.close()
    assert not rec.enabled
    assert len(logs) == 1 and logs[0][0] == "WARNING" and "rollout recording stopped" in logs[0][1]


def test_agentic_record_marks_trained_messages_and_cut_tokens(tmp_path):
    from opd_nb.engine.models import default_pair, load_tokenizer

    tok = load_tokenizer(default_pair()[0])
    ids = tok("<think>n=3</think>123", add_special_tokens=False)["input_ids"]
    msgs = [
        {"role": "user", "content": "321"},
        {"role": "assistant", "content": "<think>n=3</think>123"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "<think>n=3</think>123"},
    ]
    kept = rollouts.Turn(ids=ids, student=[-0.1] * len(ids), teacher=[-0.2] * len(ids), message=1)
    cut = rollouts.Turn(ids=ids[:4], student=[-0.3] * 4, teacher=[None] * 4, message=3, dropped=ids[4:])
    r = rollouts.Rollout(group=1, sample=2, messages=msgs, turns=[kept, cut], agentic=True)
    rec = rollouts.Recorder(tmp_path, tok).record(r, "train", 7)
    assert [m["trained"] for m in rec["messages"]] == [False, True, False, True]
    assert rec["completion"] == "<think>n=3</think>123" * 2 == "".join(t["text"] for t in rec["tokens"])
    assert [t["turn"] for t in rec["tokens"]] == [1] * len(ids) + [3] * len(ids)
    trained = [t["trained"] for t in rec["tokens"]]
    assert trained == [True] * len(ids) + [True] * 4 + [False] * (len(ids) - 4)
    assert all(
        t["student_logprob"] is None and t["teacher_logprob"] is None
        for t in rec["tokens"]
        if not t["trained"]
    )
    assert rec["rollout_status"] == "success" and rec["rollout_error"] is None and rec["sample"] == 2


@pytest.mark.slow
def test_entropy_and_kl_stats_match_the_plain_computation_chunked_or_not(monkeypatch):
    """The diagnostics come from the logits the losses form anyway: same values, chunked or not, and the
    gradients of the losses are unchanged by computing them."""
    torch = pytest.importorskip("torch")
    from opd_nb.engine import losses

    g = torch.Generator().manual_seed(0)
    hs = torch.randn(37, 8, generator=g, requires_grad=True)
    ws = torch.randn(50, 8, generator=g, requires_grad=True)
    ht, wt = torch.randn(37, 12, generator=g), torch.randn(50, 12, generator=g)
    ids = torch.randint(0, 50, (37,), generator=g)
    ls, lt = torch.log_softmax(hs @ ws.T, -1), torch.log_softmax(ht @ wt.T, -1)
    ref_ent = -(ls.exp() * ls).sum(-1)
    ref_s, ref_t = ls.gather(-1, ids[:, None])[:, 0], lt.gather(-1, ids[:, None])[:, 0]
    ref_kl = (ls.exp() * (ls - lt)).sum(-1)
    (ref_grad,) = torch.autograd.grad(ref_kl.sum() + ref_s.sum(), hs)
    for chunk in (10**9, 50 * 5):  # one chunk, then 8 chunks with recomputation in backward
        monkeypatch.setattr(losses, "CHUNK_ELEMS", chunk)
        lp, ent = losses.token_logprobs_entropy(hs, ws, None, ids)
        kl, s_lp, t_lp, ent2 = losses.reverse_kl_stats(hs, ws, None, ht, wt, None, ids)
        (grad,) = torch.autograd.grad(kl.sum() + lp.sum(), hs)
        for got, want in (
            (lp, ref_s),
            (ent, ref_ent),
            (kl, ref_kl),
            (s_lp, ref_s),
            (t_lp, ref_t),
            (ent2, ref_ent),
        ):
            assert torch.allclose(got, want, atol=1e-5)
        assert torch.allclose(grad, ref_grad, atol=1e-5)
        assert not ent.requires_grad and not s_lp.requires_grad and (ent >= 0).all()


# ---- slow: the engine's records --------------------------------------------------------------------


def _run(tmp_path: Path, name: str, n_train: int, n_val: int, **kw):
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine import make_job, run_job, task_files

    train, val = task_files(tmp_path, n_train, n_val)
    job = make_job(tmp_path, train, val if n_val else None, name, **kw)
    res, ev = run_job(job)
    return job, res, ev


def _prompt_len(messages: list[dict]) -> int:
    from opd_nb.engine.data import template_ids
    from opd_nb.engine.models import default_pair, load_tokenizer

    return len(template_ids(load_tokenizer(default_pair()[0]), messages, add_generation_prompt=True))


def _check_tokens(rec: dict) -> None:
    assert "".join(t["text"] for t in rec["tokens"]) == rec["completion"]
    for t in rec["tokens"]:
        if t.get("trained", True):
            assert t["student_logprob"] is not None and t["student_logprob"] <= 0.0
            assert t["teacher_logprob"] is None or t["teacher_logprob"] <= 0.0


def _recorded_kl(recs: list[dict]) -> float:
    d = [
        t["student_logprob"] - t["teacher_logprob"]
        for r in recs
        for t in r["tokens"]
        if t["teacher_logprob"] is not None
    ]
    return sum(d) / len(d)


@pytest.mark.slow
@pytest.mark.parametrize("algo,mini", [("pg_opd", 8), ("gkd", 16), ("gkd", 8)])
def test_records_logprobs_teacher_window_and_diagnostics(tmp_path, monkeypatch, algo, mini):
    """Every rollout recorded (16 per step): texts join, log-probs <= 0, the teacher is silent past its window,
    and the recorded log-probs reproduce the step's teacher_kl (they are the tensors the update used)."""
    monkeypatch.setenv(rollouts.PER_STEP_ENV, "16")
    hp = {"batch_size": 8, "n_rollouts": 2, "ppo_mini_batch_size": mini}
    hp.update({"eval_steps": 2, "opd_teacher_max_model_len": 30})
    job, res, ev = _run(tmp_path, algo, 32, 6, algorithm=algo, hp=hp)
    assert res.steps == 4
    out = job.output_dir
    assert rollouts.recorded_steps(out, "train") == [1, 2, 3, 4]
    assert rollouts.recorded_steps(out, "validation") == [0, 2, 4]
    rows = {r["step"]: r for r in ev.rows}
    past_window = 0
    for step in (1, 2, 3, 4):
        recs = rollouts.read_rollouts(out, step=step, kind="train")
        assert len(recs) == 16 and sorted((r["group"], r["sample"]) for r in recs) == [
            (g, k) for g in range(8) for k in range(2)
        ]
        for r in recs:
            assert r["kind"] == "train" and r["step"] == step
            _check_tokens(r)
            assert r["tokens"][-1]["id"] == 1 or r["truncated"]  # ends with EOS unless cut at max_length
            P = _prompt_len(r["messages"])
            for k, t in enumerate(r["tokens"]):
                assert (t["teacher_logprob"] is None) == (P + k >= 30), (P, k)
                past_window += P + k >= 30
        m = rows[step]
        assert m["actor/entropy"] >= 0.0 and math.isfinite(m["actor/entropy"])
        assert math.isfinite(m["trace/distillation/teacher_kl"])
        assert m["trace/distillation/teacher_kl"] == pytest.approx(_recorded_kl(recs), abs=2e-4)
        assert 0.0 < m["trace/distillation/valid_token_rate"] < 1.0
    assert past_window > 0
    val_rows = [json.loads(x) for x in Path(job.validation_file).read_text().splitlines()]
    for step in (0, 2, 4):
        recs = rollouts.read_rollouts(out, step=step, kind="validation")
        assert [r["group"] for r in recs] == list(range(6))
        assert [r["messages"] for r in recs] == [v["messages"] for v in val_rows]
        for r in recs:
            _check_tokens(r)
            # greedy answers: each token is the student's most likely one, so p >= 1 / vocabulary
            assert all(t["student_logprob"] >= -math.log(108) - 1e-3 for t in r["tokens"])
    assert rollouts.read_rollouts(out)[0]["step"] == 4  # the latest step by default


@pytest.mark.slow
def test_reward_records_carry_scores_and_zero_variance_groups(tmp_path, monkeypatch):
    from opd_nb.engine.api import RewardEndpoint
    from opd_nb.functions.server import FunctionServer

    monkeypatch.setenv(rollouts.PER_STEP_ENV, "64")
    code = tmp_path / "fn"
    code.mkdir()
    (code / "my_rewards.py").write_text(REWARDS)
    with FunctionServer.start(code, "reward", "my_rewards.Exact") as fs:
        hp = {"batch_size": 4, "n_rollouts": 3, "ppo_mini_batch_size": 12, "eval_steps": 3}
        ep = RewardEndpoint(name="exact", url=fs.url)
        job, res, ev = _run(tmp_path, "reward", 12, 4, rewards=[ep], hp=hp)
    assert res.steps == 3
    for m in (r for r in ev.rows if r["step"] > 0):
        recs = rollouts.read_rollouts(job.output_dir, step=m["step"], kind="train")
        assert len(recs) == 12
        for r in recs:
            _check_tokens(r)
            assert r["reward_status"] == "success" and r["reward_error"] is None
            assert r["reward_score"] in (0.0, 1.0) and r["reward_metrics"]["exact"] == r["reward_score"]
            assert r["reward_metrics"]["chars"] >= 0
        by: dict[int, set] = {}
        for r in recs:
            by.setdefault(r["group"], set()).add(r["reward_score"])
        assert 0.0 <= m["trace/reward/zero_variance_groups"] <= 1.0
        assert m["trace/reward/zero_variance_groups"] == sum(len(s) == 1 for s in by.values()) / len(by)
        assert m["trace/reward_metrics/exact"] == pytest.approx(sum(r["reward_score"] for r in recs) / 12)
    val = rollouts.read_rollouts(job.output_dir, step=3, kind="validation")
    assert len(val) == 4 and all(r["reward_status"] == "success" for r in val)
    mean1 = next(r["validation/data/reward/mean@1"] for r in ev.rows if r["step"] == 3)
    assert mean1 == pytest.approx(sum(r["reward_score"] for r in val) / 4)


@pytest.mark.slow
def test_retention_in_a_job_and_recording_off(tmp_path, monkeypatch):
    """The newest OPD_ROLLOUTS_KEEP_STEPS train steps (5 here, 50 by default) + every evaluation step."""
    monkeypatch.delenv(rollouts.PER_STEP_ENV, raising=False)
    monkeypatch.setenv(rollouts.KEEP_ENV, "5")
    hp = {"batch_size": 2, "n_rollouts": 1, "ppo_mini_batch_size": 2, "eval_steps": 4, "max_length": 40}
    job, res, ev = _run(tmp_path, "long", 24, 2, hp=hp)
    assert res.steps == 12
    assert rollouts.recorded_steps(job.output_dir, "validation") == [0, 4, 8, 12]
    assert rollouts.recorded_steps(job.output_dir, "train") == [4, 8, 9, 10, 11, 12]
    assert all(len(rollouts.read_rollouts(job.output_dir, step=s, kind="train")) == 2 for s in (4, 12))
    for r in ev.rows[1:]:
        assert r["actor/entropy"] >= 0.0 and math.isfinite(r["trace/distillation/teacher_kl"])
        assert "trace/reward/zero_variance_groups" not in r  # no reward, no such metric
    monkeypatch.setenv(rollouts.PER_STEP_ENV, "0")
    hp_off = {"batch_size": 2, "n_rollouts": 1, "ppo_mini_batch_size": 2, "eval_steps": 1}
    off, res_off, _ = _run(tmp_path, "off", 4, 2, hp=hp_off)
    assert res_off.steps == 2
    assert rollouts.recorded_steps(off.output_dir) == [] and not (Path(off.output_dir) / "rollouts").exists()


@pytest.mark.slow
def test_agentic_records_keep_the_trajectory_and_mark_trained_tokens(tmp_path, monkeypatch):
    from opd_nb.engine.api import RewardEndpoint, RolloutEndpoint
    from opd_nb.functions.server import FunctionServer

    monkeypatch.setenv(rollouts.PER_STEP_ENV, "3")
    code = tmp_path / "fn"
    code.mkdir()
    (code / "my_rollout.py").write_text(ROLLOUT)
    (code / "my_rewards.py").write_text(REWARDS)
    with (
        FunctionServer.start(code, "rollout", "my_rollout.TwoTurns") as rs,
        FunctionServer.start(code, "reward", "my_rewards.Exact") as fs,
    ):
        hp = {"batch_size": 2, "n_rollouts": 2, "ppo_mini_batch_size": 4, "eval_steps": 2, "max_length": 96}
        job, res, ev = _run(
            tmp_path,
            "agentic",
            4,
            2,
            rollout=RolloutEndpoint(name="two-turns", url=rs.url, concurrency=4),
            rewards=[RewardEndpoint(name="exact", url=fs.url)],
            hp=hp,
        )
    assert res.steps == 2
    recs = rollouts.read_rollouts(job.output_dir, step=2, kind="train")
    assert len(recs) == 3 and sorted({r["group"] for r in recs}) == [0, 1]  # fair: both prompts shown
    val = rollouts.read_rollouts(job.output_dir, step=2, kind="validation")
    assert [r["group"] for r in val] == [0, 1]
    for r in recs + val:
        assert r["rollout_status"] == "success" and r["reward_status"] == "success"
        roles = [(m["role"], m["trained"]) for m in r["messages"]]
        assert roles == [
            ("system", False),
            ("user", False),
            ("assistant", True),
            ("user", False),
            ("assistant", True),
        ]
        _check_tokens(r)
        assert {t["turn"] for t in r["tokens"]} == {2, 4}
        assert all(t["trained"] for t in r["tokens"])
        assert r["completion"] == r["messages"][2]["content"] + r["messages"][4]["content"]
    assert all(0.0 <= x["trace/reward/zero_variance_groups"] <= 1.0 for x in ev.rows if x["step"] > 0)


@pytest.mark.parametrize("agentic", [False, True])
def test_the_engine_writes_typed_records_whose_every_key_the_wire_names(tmp_path, agentic):
    """The engine builds its records as `wire.rollouts.RolloutRow`s; the route's models declare each of
    their keys (nothing read back as an unknown extra), native and agentic, with a reward and without."""
    from opd_nb.engine.models import default_pair, load_tokenizer
    from opd_nb.wire.rollouts import RolloutRecord, RolloutRow, RolloutToken, TokenRow

    assert set(RolloutRow.__annotations__) == set(RolloutRecord.model_fields)
    assert set(TokenRow.__annotations__) == set(RolloutToken.model_fields)
    tok = load_tokenizer(default_pair()[0])
    ids = tok("12 3", add_special_tokens=False)["input_ids"]
    turn = rollouts.Turn(ids, [-0.5] * len(ids), [-0.7] * len(ids), message=1 if agentic else None,
                         dropped=ids[:1] if agentic else [])  # fmt: skip
    reward = {
        "reward_score": 0.5,
        "reward_metrics": {"m": 1.0},
        "reward_status": "SUCCEEDED",
        "reward_error": None,
    }
    rec = rollouts.Recorder(tmp_path, tok)
    for r in (
        rollouts.Rollout(
            0,
            0,
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            [turn],
            reward=reward,
            agentic=agentic,
        ),  # fmt: skip
        rollouts.Rollout(0, 1, [{"role": "user", "content": "q"}], [turn], agentic=agentic, error="boom"),
    ):
        row = rec.record(r, "train", 3)
        record = RolloutRecord.model_validate(json.loads(json.dumps(row)))
        assert not record.model_extra and not any(t.model_extra for t in record.tokens)
        assert record.rollout_status == ("failed" if agentic and r.error else "success" if agentic else None)
        assert [t.trained for t in record.tokens][-1:] == ([False] if agentic else [None])
