"""The engine's lean forward computes what transformers computes: hidden states, gradients, greedy
decoding, whole training steps; unsupported models fall back to transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opd_nb.engine import batch as bm  # noqa: E402
from opd_nb.engine import lean, task  # noqa: E402
from opd_nb.engine.data import template_ids  # noqa: E402
from opd_nb.engine.models import default_pair, load_model, load_tokenizer  # noqa: E402

torch.set_num_threads(2)


def tiny_random(kind: str, tmp: Path, vocab: int) -> Path:
    """A random model of another supported family (saved like a user's local directory)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = dict(
        vocab_size=vocab,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
    )
    if kind == "qwen2":  # q/k/v biases, GQA 6:2
        model = Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, **common))
    else:  # llama: no q/k norm, no GQA, untied head
        model = LlamaForCausalLM(LlamaConfig(num_key_value_heads=6, tie_word_embeddings=False, **common))
    with torch.no_grad():  # biases are zero-initialised; make them matter
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    path = tmp / kind
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(default_pair()[0])


def rollout_batch(tok, n: int = 12, seed: int = 7):
    """Left-padded prompt + uneven right-padded completion rows, like the engine's rollouts."""
    seqs, masks = [], []
    for r in task.make_rows(n, seed=seed):
        p = template_ids(tok, r["messages"], add_generation_prompt=True)
        c = tok(task.target_completion(r["messages"][-1]["content"]), add_special_tokens=False)["input_ids"]
        c = c[: len(c) - len(seqs) % 3] + [tok.eos_token_id]
        seqs.append(p + c)
        masks.append([False] * len(p) + [True] * len(c))
    return bm.left_pad(seqs, masks, list(range(len(seqs))), tok.pad_token_id, "cpu")


MODELS = ["tiny-student", "tiny-teacher", "qwen2", "llama"]


def load(name: str, tmp: Path, tok):
    if name == "tiny-student":
        return load_model(default_pair()[0], "student", "cpu")
    if name == "tiny-teacher":
        return load_model(default_pair()[1], "teacher", "cpu")
    return load_model(tiny_random(name, tmp, len(tok)), name, "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_hidden_states_and_gradients_match_transformers(name, tmp_path, tok):
    model = load(name, tmp_path, tok)
    fast = lean.wrap(model)
    assert fast is not None
    b = rollout_batch(tok)
    window = b.window
    tm = bm.targets_window(b, window)[1]
    k = bm.shared_prefix(b, window)
    assert k >= 8

    def run(fn):
        model.zero_grad(set_to_none=True)
        h = fn()
        (h[tm] ** 2).sum().backward()
        return h.detach(), [
            torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()
        ]

    default = bm.MIN_SHARED_PREFIX
    bm.MIN_SHARED_PREFIX = 10**9  # the reference: transformers, every row in full
    try:
        h_ref, g_ref = run(lambda: bm.hidden_window(model, b, window))
    finally:
        bm.MIN_SHARED_PREFIX = default
    for prefix in (0, k):
        h, g = run(
            lambda k=prefix: fast.hidden_window(b.input_ids, b.attention_mask, b.position_ids, window, k)
        )
        assert h.shape == h_ref.shape
        assert torch.allclose(h[tm], h_ref[tm], atol=2e-5), (prefix, (h[tm] - h_ref[tm]).abs().max())
        for (pname, _), a, c in zip(model.named_parameters(), g, g_ref, strict=True):
            assert torch.allclose(a, c, rtol=1e-3, atol=1e-3 * float(c.abs().max()) + 1e-6), (prefix, pname)
        with torch.inference_mode():  # the no-grad path (teacher scoring) is the same function
            h_ng = fast.hidden_window(b.input_ids, b.attention_mask, b.position_ids, window, prefix)
        assert torch.allclose(h_ng[tm], h_ref[tm], atol=2e-5)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_decoding_matches_transformers_generate(name, tmp_path, tok):
    model = load(name, tmp_path, tok)
    fast = lean.wrap(model)
    prompts = [
        template_ids(tok, r["messages"], add_generation_prompt=True) for r in task.make_rows(24, seed=3)
    ]
    b = bm.left_pad(prompts, [[False] * len(p) for p in prompts], list(range(len(prompts))), 0, "cpu")
    k = bm.shared_prefix(bm.SeqBatch(b.input_ids, b.attention_mask, b.target_mask, b.group), 0)
    assert k >= 8
    eos = torch.tensor([tok.eos_token_id])
    with torch.inference_mode():
        ref = model.generate(
            input_ids=b.input_ids,
            attention_mask=b.attention_mask,
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        for prefix in (0, k):
            out = fast.decode(
                b.input_ids,
                b.attention_mask,
                prefix,
                12,
                lambda logits: logits.argmax(-1),
                eos,
                tok.pad_token_id,
            )
            n = min(out.shape[1], ref.shape[1])
            assert torch.equal(out[:, :n], ref[:, :n]), prefix
            assert (ref[:, n:] == tok.pad_token_id).all()  # generate only ran on after every row had ended


def test_the_gate_with_its_own_backward_matches_autograds():
    """swiglu (one autograd node) gives autograd's forward and gradients bit for bit; gradcheck in float64."""
    from opd_nb.engine.lean.swiglu import swiglu

    torch.manual_seed(0)
    for n in (37, 1261):
        gu = torch.randn(n, 2 * 24, requires_grad=True)
        d = torch.randn(n, 24)
        gate, up = gu.chunk(2, -1)
        ref = torch.nn.functional.silu(gate) * up
        (g_ref,) = torch.autograd.grad(ref, gu, d)
        y = swiglu(gu)
        (g,) = torch.autograd.grad(y, gu, d)
        assert torch.equal(y, ref) and torch.equal(g, g_ref)
    assert torch.autograd.gradcheck(swiglu, (torch.randn(5, 8, dtype=torch.float64, requires_grad=True),))


def test_cached_fused_weights_follow_an_optimizer_step(tok):
    """No-grad forwards cache the fused weights; an in-place update must invalidate them."""
    model = load_model(default_pair()[0], "student", "cpu")
    fast = lean.wrap(model)
    b = rollout_batch(tok, n=4)
    args = (b.input_ids, b.attention_mask, b.position_ids, b.window, 0)
    with torch.no_grad():
        before = fast.hidden_window(*args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)  # as the trainer steps
    h = fast.hidden_window(*args)
    h.pow(2).sum().backward()
    opt.step()
    with torch.no_grad():
        after = fast.hidden_window(*args)
        ref = bm.hidden_window(model, b, b.window)
    assert not torch.allclose(before, after)
    assert torch.allclose(after, ref, rtol=1e-4, atol=1e-4)


def test_unsupported_models_and_the_opt_out_use_transformers(tmp_path, monkeypatch, tok):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert lean.wrap(gpt2) is None
    scaled = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
        )
    )
    assert lean.wrap(scaled) is None
    student = load_model(default_pair()[0], "student", "cpu")
    assert lean.wrap(student) is not None
    assert lean.wrap(student.to(torch.bfloat16)) is None
    monkeypatch.setenv(lean.DISABLE_ENV, "0")
    assert lean.wrap(load_model(default_pair()[0], "student", "cpu")) is None


def _engine_runs(tmp: Path) -> list[dict]:
    """Three pg_opd steps of the same job, run twice in one fresh process (the allocator is per
    process): first with the lean forward, then with it switched off (``wrap`` reads the switch
    at each load). One process pays the torch/transformers import once for both."""
    script = f"""
import json, os
import torch
torch.set_num_threads(1)
from opd_nb.engine import lean, task
from opd_nb.engine.api import EngineJob
from opd_nb.engine.models import default_pair
from opd_nb.engine.trainer import ListEvents, run
s, t = default_pair()
out = {str(tmp)!r}
open(out + "/train.jsonl", "w").write("\\n".join(json.dumps(r) for r in task.make_rows(48, seed=5)) + "\\n")
runs = []
for name, switch in (("lean", "1"), ("transformers", "0")):
    os.environ[lean.DISABLE_ENV] = switch
    job = EngineJob(job_id="eq-" + name, student_path=str(s), teacher_path=str(t),
                    train_file=out + "/train.jsonl", validation_file=None, algorithm="pg_opd",
                    output_dir=out + "/" + name, seed=3,
                    hyper_parameters={{"batch_size": 16, "n_rollouts": 2, "ppo_mini_batch_size": 16,
                                      "n_epochs": 1, "max_length": 48, "save_strategy": "no",
                                      "eval_steps": 1000}})
    ev = ListEvents()
    run(job, ev)
    runs.append({{"rows": ev.rows, "log": ev.text}})
print(json.dumps(runs))
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_training_job_is_the_same_with_the_lean_forward_and_with_transformers(tmp_path):
    fast, slow = _engine_runs(tmp_path)
    assert "student lean fused (qwen3)" in fast["log"]
    assert "student transformers (qwen3)" in slow["log"]
    assert len(fast["rows"]) == len(slow["rows"]) == 3
    for a, c in zip(fast["rows"], slow["rows"], strict=True):
        assert a["response_length/mean"] == c["response_length/mean"]  # the same sampled rollouts
        for key in ("actor/distillation/loss", "actor/grad_norm", "actor/pg_clipfrac"):
            assert a[key] == pytest.approx(c[key], rel=1e-3, abs=1e-5), key
