"""Build the bundled tiny teacher/student pair from scratch, offline.

Why: the local engine must really train, and tests/tutorials need a pair where on-policy
distillation visibly works within seconds on a CPU. Nothing here touches the network.

What it writes (Hugging Face format, safetensors, a few MB in total)::

    opd_nb/engine/assets/tiny-teacher/   Qwen3, ~0.74M params, SFT'd to >= 95% greedy exact match
    opd_nb/engine/assets/tiny-student/   Qwen3, ~0.1M params, a short SFT that leaves it weak (<= 40%),
                                         then a tool phase: it can use the example tool but seldom calls it

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

# Renders messages compactly; offered tools become one leading line (`<|system|>tools:name(arg,..)`, one per tool),
# tool calls become <tool_call>{"name":..,"arguments":..}</tool_call>.
CHAT_TEMPLATE = (
    "{%- if tools -%}<|system|>tools:"
    "{%- for t in tools -%}"
    "{%- set f = t['function'] if t['function'] is defined else t -%}"
    "{%- set p = f.get('parameters') or {} -%}"
    " {{ f['name'] }}({{ (p.get('properties') or {}) | join(',') }})"
    "{%- endfor -%}"
    "{%- endif -%}"
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


def teacher_trajectory(row: dict) -> list[dict]:
    """What the teacher is taught for a row: the answer, or (tools offered) the tool call, result, answer."""
    digits = row["messages"][-1]["content"]
    if row.get("tools"):
        return task.tool_trajectory(digits)
    return [*row["messages"], {"role": "assistant", "content": task.target_completion(digits)}]


def turn_target(tokenizer, context: list[dict], turn: dict, tools) -> tuple[list[int], list[int]]:
    """(context ids with the generation prompt, the turn's ids after them), as the engine cuts a turn.

    The target ends with the template's end-of-turn (the EOS)."""
    from opd_nb.engine.data import template_ids

    ctx = template_ids(tokenizer, context, tools=tools, add_generation_prompt=True)
    full = template_ids(tokenizer, [*context, turn], tools=tools)
    assert full[: len(ctx)] == ctx, "the chat template must render a turn as a suffix of its context"
    return ctx, full[len(ctx) :]


def encode_rows(tokenizer, rows: list[dict]):
    """(context ids, target ids) per assistant turn of each row's teacher trajectory (:func:`turn_target`);
    a tool-using row gives two turns."""
    prompts, targets = [], []
    for r in rows:
        msgs = teacher_trajectory(r)
        for a, m in enumerate(msgs):
            if m["role"] == "assistant":
                ctx, target = turn_target(tokenizer, msgs[:a], m, r.get("tools"))
                prompts.append(ctx)
                targets.append(target)
    return prompts, targets


def sft_batch(prompts, targets, idx, pad_id, n_skip=None):
    """Left-padded prompt+target batch, labels only on the target tokens (all but the first ``n_skip[i]``
    of them when given)."""
    import torch

    seqs = [prompts[i] + targets[i] for i in idx]
    lab = [
        [-100] * len(prompts[i])
        + [t if n_skip is None or k >= n_skip[i] else -100 for k, t in enumerate(targets[i])]
        for i in idx
    ]
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


def left_padded(prompts: list[list[int]], pad_id: int):
    """(ids, attention mask) of the prompts, left-padded to the longest, for ``generate``."""
    import torch

    n = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), n), pad_id)
    att = torch.zeros((len(prompts), n), dtype=torch.long)
    for j, p in enumerate(prompts):
        ids[j, n - len(p) :] = torch.tensor(p)
        att[j, n - len(p) :] = 1
    return ids, att


def greedy_texts(
    model, tokenizer, prompts: list[list[int]], max_new: int, batch: int = 256
) -> list[str | None]:
    """Greedy completion text per prompt (None when it did not end with the EOS within `max_new`)."""
    import torch

    model.eval()
    texts: list[str | None] = []
    with torch.no_grad():
        for s in range(0, len(prompts), batch):
            chunk = prompts[s : s + batch]
            ids, att = left_padded(chunk, tokenizer.pad_token_id)
            n = ids.shape[1]
            out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new, do_sample=False)
            for j in range(len(chunk)):
                text = tokenizer.decode(out[j, n:], skip_special_tokens=False)
                texts.append(text.split(tokenizer.eos_token)[0] if tokenizer.eos_token in text else None)
    model.train()
    return texts


def own_answers(model, tokenizer, rows) -> list[str | None]:
    """The model's greedy answer to each row's plain prompt (None when it ran on without an EOS)."""
    from opd_nb.engine.data import template_ids

    prompts = [template_ids(tokenizer, r["messages"], add_generation_prompt=True) for r in rows]
    return greedy_texts(model, tokenizer, prompts, 16)


def greedy_accuracy(model, tokenizer, rows) -> float:
    """Exact match of the greedy answer on plain rows (no tools)."""
    texts = own_answers(model, tokenizer, rows)
    ok = sum(
        t is not None and task.is_correct(t, r["rollout_extra"]["solution"])
        for t, r in zip(texts, rows, strict=True)
    )
    return ok / len(rows)


def _tool_message(call: dict) -> dict:
    """The template rollout's answer to a call: the tool's result, or an error the model sees."""
    f = call["function"]
    try:
        args = json.loads(f["arguments"])
        content = task.tool_result(args["digits"]) if f["name"] == task.TOOL_NAME else None
    except (ValueError, KeyError, TypeError):
        content = None
    content = content or json.dumps({"error": f"bad call of {f['name']!r}"})
    return {"role": "tool", "tool_call_id": call["id"], "name": f["name"], "content": content}


def tool_loop_accuracy(model, tokenizer, rows, max_turns: int = 4) -> tuple[float, float]:
    """Exact match of the final greedy answer on tool-using rows, through the template rollout's loop;
    an answer given without calling the tool counts as wrong (the task is to use it).

    Returns (accuracy, share of rows where the tool was called at all)."""
    from opd_nb.engine.data import template_ids
    from opd_nb.engine.openai_wire import parse_tool_calls

    convs = [list(r["messages"]) for r in rows]
    final: list[str | None] = [None] * len(rows)
    live = list(range(len(rows)))
    for _ in range(max_turns):
        if not live:
            break
        prompts = [
            template_ids(tokenizer, convs[i], tools=rows[i]["tools"], add_generation_prompt=True)
            for i in live
        ]
        texts = greedy_texts(model, tokenizer, prompts, 96)
        nxt = []
        for i, text in zip(live, texts, strict=True):
            content, calls = parse_tool_calls(text or "")
            if text is None or not calls:
                final[i] = text
                continue
            convs[i].append({"role": "assistant", "content": content, "tool_calls": calls})
            convs[i].extend(_tool_message(c) for c in calls)
            nxt.append(i)
        live = nxt
    called = [any(m["role"] == "tool" for m in c) for c in convs]
    ok = sum(
        c and t is not None and task.is_correct(t, r["rollout_extra"]["solution"])
        for c, t, r in zip(called, final, rows, strict=True)
    )
    return ok / len(rows), sum(called) / len(rows)


def sft(
    model,
    tokenizer,
    train_rows,
    evaluate,
    *,
    lr,
    steps,
    batch,
    seed,
    stop,
    eval_every,
    label,
    on_eval=None,
    encoded=None,
):
    """Plain SFT on every assistant turn of the rows (or on `encoded`: contexts, targets, and per target
    the number of leading tokens left unlabelled, or None);
    `evaluate(model)` -> accuracies, `stop(accs)` ends training early at an eval, `on_eval(accs)` runs after
    each one. Returns the last accuracies."""
    import torch

    prompts, targets, masks = encoded if encoded is not None else (*encode_rows(tokenizer, train_rows), None)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
        ),
    )
    rng = random.Random(seed)
    model.train()
    accs: dict[str, float] = {}
    t0 = time.time()
    for step in range(1, steps + 1):
        idx = rng.sample(range(len(prompts)), batch)
        ids, att, pos, labels = sft_batch(prompts, targets, idx, tokenizer.pad_token_id, masks)
        loss = model(input_ids=ids, attention_mask=att, position_ids=pos, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % eval_every == 0 or step == steps:
            accs = evaluate(model)
            shown = " ".join(f"{k}={v:.3f}" for k, v in accs.items())
            print(
                f"[{label}] step {step}/{steps} loss={loss.item():.4f} {shown} ({time.time() - t0:.0f}s)",
                flush=True,
            )
            if on_eval is not None:
                on_eval(accs)
            if stop(accs):
                break
    return accs


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
        f"# {card['name']}\n\nTiny stand-in made by `scripts/make_tiny_models.py` (offline) for the "
        "digit-sorting task in `opd_nb/engine/task.py`: `greedy_exact_match` without tools, "
        "`tool_loop_exact_match` with the example tool offered (greedy, through the template rollout's "
        "tool loop); for the student also `sampled_tool_call_rate`, the share of first turns sampled at "
        "temperature 1 that call the tool, and `sampled_valid_call_share`, the share of those calls that "
        "parse and carry the row's digits.\n\n```json\n" + json.dumps(card, indent=2) + "\n```\n"
    )


def evaluator(tokenizer, plain_rows, tool_rows):
    """Both tasks' greedy accuracies, as the model cards record them."""

    def evaluate(model) -> dict[str, float]:
        acc, calls = tool_loop_accuracy(model, tokenizer, tool_rows)
        return {
            "greedy_exact_match": greedy_accuracy(model, tokenizer, plain_rows),
            "tool_loop_exact_match": acc,
            "greedy_tool_call_rate": calls,
        }

    return evaluate


def good_teacher(accs: dict[str, float]) -> bool:
    """The acceptance bar: >= 95% greedy exact match on both variants."""
    return min(accs["greedy_exact_match"], accs["tool_loop_exact_match"]) >= 0.95


def make_teacher(tokenizer, train_rows, evaluate, args):
    """The teacher: SFT on both variants (from scratch, or continued from --teacher-init); every eval that
    meets the bar is saved, so a long run can be stopped once it is good enough."""
    if args.teacher_init:
        from transformers import AutoModelForCausalLM

        teacher = AutoModelForCausalLM.from_pretrained(args.teacher_init)
    else:
        teacher = build_model(tokenizer, TEACHER, args.seed)

    def keep(accs: dict[str, float]) -> None:
        if good_teacher(accs):
            save(
                teacher,
                tokenizer,
                Path(args.out) / "tiny-teacher",
                card("tiny-teacher", teacher, accs, TEACHER),
            )

    accs = sft(
        teacher,
        tokenizer,
        train_rows,
        evaluate,
        lr=args.teacher_lr,
        steps=args.teacher_steps,
        batch=args.teacher_batch,
        seed=args.seed,
        stop=lambda a: a["greedy_exact_match"] >= 0.985 and a["tool_loop_exact_match"] >= 0.985,
        eval_every=args.teacher_eval_every,
        label="teacher",
        on_eval=keep,
    )
    return teacher, accs


def encode_student_mix(model, tokenizer, tool_rows, plain_rows, call_share: float, seed: int):
    """The student's tool phase. A `call_share` of the tool rows get the whole tool-call turn; the other
    tool rows, and the plain rows, get the student's own greedy answer (so its sorting stays exactly as
    weak as the plain phase left it, tools line or not). Every tool row also gives its call turn once more
    with the opening ``<tool_call>`` unlabelled (that teaches the call's body without raising the rate),
    and the answer written from the tool's result. Trained to convergence, this leaves a student that can
    use the tool but seldom reaches for it (about `call_share` of its samples, none of its greedy turns),
    as with a real student: on-policy distillation has to teach it to call, and to call well."""
    rng = random.Random(seed)
    answers = own_answers(model, tokenizer, tool_rows + plain_rows)
    prompts, targets, n_skip = [], [], []

    def add(r, context: list[dict], turn: dict, skip: int) -> None:
        ctx, target = turn_target(tokenizer, context, turn, r.get("tools"))
        prompts.append(ctx)
        targets.append(target)
        n_skip.append(skip)

    for r, own in zip(tool_rows + plain_rows, answers, strict=True):
        if r.get("tools"):
            *context, call, result, answer = task.tool_trajectory(r["messages"][-1]["content"])
            add(r, context, call, 1)
            add(r, [*context, call, result], answer, 0)
        if r.get("tools") and rng.random() < call_share:
            add(r, r["messages"], call, 0)
        elif own is not None:
            add(r, r["messages"], {"role": "assistant", "content": own}, 0)
    return prompts, targets, n_skip


def sampled_call_stats(model, tokenizer, rows, n: int = 4) -> dict[str, float]:
    """First turns sampled at temperature 1 (`n` per row): the share that call the tool, and the share of
    those calls that parse and carry the row's digits (what the rollout can run)."""
    import torch

    from opd_nb.engine.data import template_ids
    from opd_nb.engine.openai_wire import parse_tool_calls

    prompts = [
        template_ids(tokenizer, r["messages"], tools=r["tools"], add_generation_prompt=True) for r in rows
    ]
    ids, att = left_padded(prompts, tokenizer.pad_token_id)
    L = ids.shape[1]
    model.eval()
    calls = valid = 0
    torch.manual_seed(0)
    with torch.no_grad():
        for _ in range(n):
            out = model.generate(
                input_ids=ids, attention_mask=att, max_new_tokens=96, do_sample=True, top_k=0, top_p=1.0
            )
            for j, r in enumerate(rows):
                text = tokenizer.decode(out[j, L:], skip_special_tokens=False).split(tokenizer.eos_token)[0]
                if not text.startswith("<tool_call>"):
                    continue
                calls += 1
                _, parsed = parse_tool_calls(text)
                try:
                    args = json.loads(parsed[0]["function"]["arguments"]) if parsed else {}
                except ValueError:
                    args = {}
                valid += args.get("digits") == r["messages"][-1]["content"]
    model.train()
    return {
        "sampled_tool_call_rate": calls / (n * len(rows)),
        "sampled_valid_call_share": valid / max(calls, 1),
    }


def make_student(tokenizer, plain_rows, tool_rows, evaluate, args):
    """The student: a short SFT on the plain task, stopped while it is still weak, then the tool phase of
    :func:`encode_student_mix` (so that on-policy distillation has something to sharpen, as with a real
    student: a rare, well-formed habit of calling the tool)."""
    from transformers import AutoModelForCausalLM

    if args.student_init:
        student = AutoModelForCausalLM.from_pretrained(args.student_init)
    else:
        student = build_model(tokenizer, STUDENT, args.seed + 1)
        sft(
            student,
            tokenizer,
            plain_rows,
            evaluate,
            lr=3e-3,
            steps=args.student_steps,
            batch=64,
            seed=args.seed + 1,
            stop=lambda a: a["greedy_exact_match"] >= args.student_target,
            eval_every=5,
            label="student",
        )
    if args.student_tool_steps <= 0:
        return student, evaluate(student)

    def evaluate_tools(model) -> dict[str, float]:
        return {**evaluate(model), **sampled_call_stats(model, tokenizer, tool_rows[:128])}

    accs = sft(
        student,
        tokenizer,
        None,
        evaluate_tools,
        lr=args.student_tool_lr,
        steps=args.student_tool_steps,
        batch=64,
        seed=args.seed + 2,
        stop=lambda a: False,
        eval_every=args.student_tool_steps // 4,
        label="student-tools",
        encoded=encode_student_mix(
            student,
            tokenizer,
            tool_rows,
            plain_rows[-len(tool_rows) :],
            args.student_call_share,
            args.seed + 3,
        ),
    )
    return student, accs


def card(name: str, model, accs: dict[str, float], shape: dict) -> dict:
    n = sum(p.numel() for p in model.parameters())
    return {"name": name, "params": n, **{k: round(v, 4) for k, v in accs.items()}, **shape}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "opd_nb" / "engine" / "assets"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--teacher-steps", type=int, default=2000)
    ap.add_argument("--teacher-lr", type=float, default=3e-3)
    ap.add_argument("--teacher-batch", type=int, default=96)
    ap.add_argument("--teacher-eval-every", type=int, default=200)
    ap.add_argument(
        "--teacher-plain-rows", type=int, default=20_000, help="plain rows in the teacher's SFT mix"
    )
    ap.add_argument(
        "--teacher-init", default=None, help="continue the teacher's SFT from this model directory"
    )
    ap.add_argument("--tool-rows", type=int, default=8000, help="tool-using training rows (two turns each)")
    ap.add_argument("--student-steps", type=int, default=400)
    ap.add_argument(
        "--student-target", type=float, default=0.20, help="stop the student's SFT at this accuracy"
    )
    ap.add_argument("--student-only", action="store_true", help="only (re)make the student")
    ap.add_argument(
        "--student-init", default=None, help="skip the plain SFT: start from this model directory"
    )
    ap.add_argument("--student-tool-steps", type=int, default=800, help="steps of the tool phase (0: none)")
    ap.add_argument("--student-tool-lr", type=float, default=2e-3)
    ap.add_argument(
        "--student-call-share",
        type=float,
        default=0.15,
        help="share of the tool phase's rows whose first turn is a call (the student's starting call rate)",
    )
    ap.add_argument("--student-tool-rows", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    tokenizer = build_tokenizer()
    eval_plain = task.make_rows(512, seed=10_000 + args.seed)
    eval_tools = task.make_rows(256, seed=11_000 + args.seed, tools=True)
    held = {r["messages"][-1]["content"] for r in eval_plain + eval_tools}
    plain = task.make_rows(20_000, seed=args.seed, exclude=held)
    tools = task.make_rows(args.tool_rows, seed=args.seed + 7, exclude=held, tools=True)
    evaluate = evaluator(tokenizer, eval_plain, eval_tools)

    if not args.student_only:
        teacher, t_accs = make_teacher(tokenizer, plain[: args.teacher_plain_rows] + tools, evaluate, args)
        if not good_teacher(t_accs):
            print(f"teacher reached only {t_accs} (< 0.95); raise --teacher-steps", file=sys.stderr)
            return 1
        save(teacher, tokenizer, out / "tiny-teacher", card("tiny-teacher", teacher, t_accs, TEACHER))
        print(f"teacher: {t_accs}")

    student, s_accs = make_student(tokenizer, plain, tools[: args.student_tool_rows], evaluate, args)
    if max(s_accs["greedy_exact_match"], s_accs["tool_loop_exact_match"]) > 0.40:
        print(f"student is too strong ({s_accs} > 0.40); lower --student-target", file=sys.stderr)
        return 1
    save(student, tokenizer, out / "tiny-student", card("tiny-student", student, s_accs, STUDENT))
    print(f"student: {s_accs}; written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
