"""Build the bundled tiny teacher/student pair from scratch, offline.

Why: the local engine must really train, and tests/tutorials need a pair where on-policy
distillation visibly works within seconds on a CPU. Nothing here touches the network.

What it writes (Hugging Face format, safetensors, a few MB in total)::

    opd_nb/engine/assets/tiny-teacher/   Qwen3, ~0.74M params, SFT'd to >= 95% greedy exact match
    opd_nb/engine/assets/tiny-student/   Qwen3, ~0.1M params, a short SFT that leaves it weak (<= 40%)

Both share one character-level tokenizer (printable ASCII plus atomic special tokens) and a
compact chat template that renders system/user/assistant/tool turns and tool calls.
Usage: ``python scripts/make_tiny_models.py [--out DIR] [--seed 0]`` (a few minutes on a CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opd_nb.engine import task  # noqa: E402

SPECIAL = ["<pad>", "<|end|>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
ATOMIC = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
CHARS = [chr(i) for i in range(32, 127)] + ["\n", "\t"]

# Renders messages compactly; tool calls become <tool_call>{"name":..,"arguments":..}</tool_call>.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}<|system|>{{ m['content'] }}"
    "{%- elif m['role'] == 'user' -%}<|user|>{{ m['content'] }}"
    "{%- elif m['role'] == 'assistant' -%}<|assistant|>"
    "{%- if m['content'] -%}{{ m['content'] }}{%- endif -%}"
    "{%- for tc in (m['tool_calls'] or []) -%}"
    "{%- set f = tc['function'] if tc['function'] is defined else tc -%}"
    '<tool_call>{"name": "{{ f[\'name\'] }}", "arguments": '
    "{%- if f['arguments'] is string -%}{{ f['arguments'] }}{%- else -%}{{ f['arguments'] | tojson }}{%- endif -%}"
    "}</tool_call>"
    "{%- endfor -%}<|end|>"
    "{%- elif m['role'] == 'tool' -%}<|tool|>{{ m['content'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)

TEACHER = dict(hidden_size=128, num_hidden_layers=3, intermediate_size=512)
STUDENT = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256)


def build_tokenizer():
    """Character-level tokenizer; special and thinking/tool tags are single tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + ATOMIC + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in ATOMIC])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|end|>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=256,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, shape: dict, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    # Qwen3, not Qwen2: AutoTokenizer forces Qwen2Tokenizer (byte-level) on every qwen2 checkpoint,
    # which would silently re-tokenise our character-level vocabulary.
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=shape["hidden_size"] // 4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **shape,
    )
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def encode_rows(tokenizer, rows: list[dict]):
    """Prompt ids (chat template + generation prompt) and target ids (completion + eos)."""
    prompts, targets = [], []
    for r in rows:
        p = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True)
        if hasattr(p, "keys"):  # BatchEncoding in recent transformers
            p = p["input_ids"]
        digits = r["messages"][-1]["content"]
        t = tokenizer(task.target_completion(digits), add_special_tokens=False)["input_ids"]
        prompts.append(list(p))
        targets.append(list(t) + [tokenizer.eos_token_id])
    return prompts, targets


def sft_batch(prompts, targets, idx, pad_id):
    """Left-padded prompt+target batch, labels only on the target tokens."""
    import torch

    seqs = [prompts[i] + targets[i] for i in idx]
    lab = [[-100] * len(prompts[i]) + targets[i] for i in idx]
    n = max(len(s) for s in seqs)
    ids = torch.full((len(idx), n), pad_id)
    labels = torch.full((len(idx), n), -100)
    att = torch.zeros((len(idx), n), dtype=torch.long)
    for j, (s, lb) in enumerate(zip(seqs, lab, strict=True)):
        ids[j, n - len(s) :] = torch.tensor(s)
        labels[j, n - len(s) :] = torch.tensor(lb)
        att[j, n - len(s) :] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return ids, att, pos, labels


def greedy_accuracy(model, tokenizer, rows, prompts, batch: int = 256) -> float:
    import torch

    model.eval()
    ok = 0
    with torch.no_grad():
        for s in range(0, len(rows), batch):
            chunk = list(range(s, min(len(rows), s + batch)))
            n = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), n), tokenizer.pad_token_id)
            att = torch.zeros((len(chunk), n), dtype=torch.long)
            for j, i in enumerate(chunk):
                ids[j, n - len(prompts[i]) :] = torch.tensor(prompts[i])
                att[j, n - len(prompts[i]) :] = 1
            out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=16, do_sample=False)
            for j, i in enumerate(chunk):
                text = tokenizer.decode(out[j, n:], skip_special_tokens=False)
                text = text.split(tokenizer.eos_token)[0] if tokenizer.eos_token in text else None
                if text is not None and task.is_correct(text, rows[i]["rollout_extra"]["solution"]):
                    ok += 1
    model.train()
    return ok / len(rows)


def sft(model, tokenizer, train_rows, eval_rows, *, lr, steps, batch, seed, stop, eval_every, label):
    """Plain SFT on the task; `stop(acc)` ends training early at an eval."""
    import torch

    prompts, targets = encode_rows(tokenizer, train_rows)
    ev_prompts, _ = encode_rows(tokenizer, eval_rows)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
        ),
    )
    rng = random.Random(seed)
    model.train()
    acc = 0.0
    t0 = time.time()
    for step in range(1, steps + 1):
        idx = rng.sample(range(len(train_rows)), batch)
        ids, att, pos, labels = sft_batch(prompts, targets, idx, tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=att, position_ids=pos, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % eval_every == 0 or step == steps:
            acc = greedy_accuracy(model, tokenizer, eval_rows, ev_prompts)
            print(
                f"[{label}] step {step}/{steps} loss={loss.item():.4f} acc={acc:.3f} ({time.time() - t0:.0f}s)",
                flush=True,
            )
            if stop(acc):
                break
    return acc


def embed_chat_template(out: Path) -> None:
    """Also keep the template in tokenizer_config.json, where older transformers releases look for it."""
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def save(model, tokenizer, out: Path, card: dict) -> None:
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    embed_chat_template(out)
    (out / "README.md").write_text(
        f"# {card['name']}\n\nTiny stand-in made by `scripts/make_tiny_models.py` (offline, from scratch) for the "
        "digit-sorting task in `opd_nb/engine/task.py`.\n\n```json\n" + json.dumps(card, indent=2) + "\n```\n"
    )


def train_teacher(teacher, tokenizer, train_rows, eval_rows, args) -> float:
    return sft(
        teacher,
        tokenizer,
        train_rows,
        eval_rows,
        lr=3e-3,
        steps=args.teacher_steps,
        batch=96,
        seed=args.seed,
        stop=lambda a: a >= 0.985,
        eval_every=200,
        label="teacher",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "opd_nb" / "engine" / "assets"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--teacher-steps", type=int, default=1000)
    ap.add_argument("--student-steps", type=int, default=400)
    ap.add_argument(
        "--student-target", type=float, default=0.20, help="stop the student's SFT at this accuracy"
    )
    ap.add_argument("--reuse-teacher", action="store_true", help="keep an existing tiny-teacher in --out")
    ap.add_argument("--student-only", action="store_true", help="only (re)make the student")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    tokenizer = build_tokenizer()
    eval_rows = task.make_rows(512, seed=10_000 + args.seed)
    held = {r["messages"][-1]["content"] for r in eval_rows}
    train_rows = task.make_rows(20_000, seed=args.seed, exclude=held)

    if args.student_only:
        t_acc, n_t = float("nan"), 0
    elif args.reuse_teacher and (out / "tiny-teacher" / "config.json").is_file():
        from transformers import AutoModelForCausalLM

        teacher = AutoModelForCausalLM.from_pretrained(out / "tiny-teacher")
        ev_prompts, _ = encode_rows(tokenizer, eval_rows)
        t_acc = greedy_accuracy(teacher, tokenizer, eval_rows, ev_prompts)
        print(f"[teacher] reused, acc={t_acc:.3f}")
    else:
        teacher = build_model(tokenizer, TEACHER, args.seed)
        t_acc = train_teacher(teacher, tokenizer, train_rows, eval_rows, args)
    if not args.student_only:
        if t_acc < 0.95:
            print(f"teacher reached only {t_acc:.3f} < 0.95; raise --teacher-steps", file=sys.stderr)
            return 1
        n_t = sum(p.numel() for p in teacher.parameters())
        save(
            teacher,
            tokenizer,
            out / "tiny-teacher",
            {"name": "tiny-teacher", "params": n_t, "greedy_exact_match": round(t_acc, 4), **TEACHER},
        )

    student = build_model(tokenizer, STUDENT, args.seed + 1)
    s_acc = sft(
        student,
        tokenizer,
        train_rows,
        eval_rows,
        lr=3e-3,
        steps=args.student_steps,
        batch=64,
        seed=args.seed + 1,
        stop=lambda a: a >= args.student_target,
        eval_every=5,
        label="student",
    )
    if s_acc > 0.40:
        print(f"student is too strong ({s_acc:.3f} > 0.40); lower --student-target", file=sys.stderr)
        return 1
    n_s = sum(p.numel() for p in student.parameters())
    save(
        student,
        tokenizer,
        out / "tiny-student",
        {"name": "tiny-student", "params": n_s, "greedy_exact_match": round(s_acc, 4), **STUDENT},
    )
    print(f"teacher {n_t} params acc={t_acc:.3f}; student {n_s} params acc={s_acc:.3f}; written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
