"""Decoding and sampling from one causal LM: what training rollouts, agentic serving and deployments share.

Why one module: the native rollouts, the agentic endpoint (through ``generate_ids``) and a
deployment's serving process (:mod:`opd_nb.engine.serving`) all left-pad prompts, filter the
next-token distribution by temperature and top-p, and run the same KV-cache decode loop: through
:mod:`opd_nb.engine.lean` for Llama-family models, else a ``transformers`` loop. :class:`TorchSampler`
is the engine's generation backend (:mod:`opd_nb.engine.samplers` names the seam). Why not ``generate``: at small scale its per-token bookkeeping costs as much as the model.

Draws: training samples by inverse CDF from the job's global RNG (the same distribution as
``torch.multinomial`` at a sixth of its cost here), or from one seeded stream per row
(:func:`row_draws`: what a request samples does not depend on which others shared its batch);
a deployment draws with ``torch.multinomial`` from the request's own seeded generator.

At the edges of the documented ranges (a temperature in [0, 2], a top-p in (0, 1]) the picks are
defined, never NaN: a temperature below :data:`GREEDY_BELOW` (a subnormal one too, whose logits/T
overflow to inf - inf) and a top-p below it (which float32 flushes to 0, an empty nucleus) are
greedy decoding, as vLLM treats a temperature under 1e-5; and a row whose filtered distribution is
still not a distribution (no finite positive mass) is picked by argmax rather than handed to
``torch.multinomial``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.models import Models

Pick = Callable[[Any], Any]  # logits [B, V] -> next token ids [B]
GREEDY_BELOW = 1e-5  # a temperature or top-p under this is greedy decoding


def is_greedy(temperature: float, top_p: float) -> bool:
    """Whether (temperature, top_p) means argmax: either below :data:`GREEDY_BELOW` (0 included)."""
    return not (temperature >= GREEDY_BELOW and top_p >= GREEDY_BELOW)


def pad_prompts(torch: Any, prompt_ids: list[list[int]], pad: int, device: Any) -> tuple[Any, Any]:
    """Left-padded prompt ids and their attention mask, [B, P] each, on `device`."""
    from opd_nb.engine.batch import left_padded

    ids = torch.tensor(left_padded(prompt_ids, pad), dtype=torch.long)
    att = torch.tensor(left_padded([[1] * len(x) for x in prompt_ids], 0), dtype=torch.long)
    return ids.to(device), att.to(device)


def filtered_probs(torch: Any, logits: Any, temperature: float, top_p: float) -> Any:
    """The next-token distribution at `temperature`, cut to its top-p nucleus (not renormalised)."""
    probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, -1)  # x / 1 is x
    if top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        keep = (sp.cumsum(-1) - sp) < top_p
        probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
    return probs


def inverse_cdf_pick(
    torch: Any, temperature: float, top_p: float, greedy: bool, lps: list[Tensor] | None, draws: Any, n: int
) -> Pick:
    """The training picker: argmax (`lps`: also keep the chosen token's log-prob) or an inverse-CDF draw.

    `draws` ([B, n] uniforms): decode step t samples with column t instead of the global RNG.
    """
    cols = iter(()) if draws is None else iter(draws.t()[:, :, None])  # column t as [B, 1], one view each

    def pick(logits: Any) -> Any:
        if greedy and lps is not None:  # the chosen token's log-prob comes with the argmax
            top, arg = logits.max(-1)
            lps.append(top - logits.logsumexp(-1))
            return arg
        if greedy:
            return logits.argmax(-1)
        probs = filtered_probs(torch, logits, temperature, top_p)
        # a token of probability 0 is never drawn (its CDF step is empty)
        cdf = probs.cumsum(-1)
        u = torch.rand((probs.shape[0], 1), device=probs.device) if draws is None else next(cols)
        u = u * cdf[:, -1:]
        return (cdf < u).sum(-1).clamp(max=probs.shape[-1] - 1)

    return pick


def multinomial_pick(torch: Any, temperature: float, top_p: float, generator: Any) -> Pick:
    """A deployment's picker: argmax when greedy (:func:`is_greedy`), else ``torch.multinomial`` from
    `generator`; a row with no finite positive mass (NaN logits) is picked by argmax instead."""
    if is_greedy(temperature, top_p):
        return lambda logits: logits.argmax(-1)

    def pick(logits: Any) -> Any:
        probs = filtered_probs(torch, logits, temperature, top_p)
        sane = torch.isfinite(probs).all(-1) & (probs.sum(-1) > 0)
        if not bool(sane.all()):
            top = torch.nn.functional.one_hot(logits.nan_to_num(-torch.inf).argmax(-1), probs.shape[-1])
            probs = torch.where(sane[:, None], probs.nan_to_num(0.0), top.to(probs.dtype))
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return pick


def row_draws(torch: Any, seeds: list[int], n: int, device: Any) -> Any:
    """[len(seeds), n] uniforms, row j from a generator seeded with ``seeds[j]`` (rand(n) is a prefix of
    rand(m) for one seed, so a row's draws do not depend on how many steps its batch decodes)."""
    return torch.stack([torch.rand(n, generator=torch.Generator().manual_seed(s)) for s in seeds]).to(device)


def hf_decode(
    model: Any, ids: Any, att: Any, prefix: int, max_new: int, pick: Pick, eos: Any, pad: int
) -> Any:
    """The decode loop over the ``transformers`` forward (architectures the lean one does not cover).

    Same contract as :meth:`opd_nb.engine.lean.forward.LeanLM.decode`: [B, P + generated], rows padded after EOS.
    """
    import torch
    from transformers.cache_utils import DynamicCache

    from opd_nb.engine.batch import cache_kw, prefix_forward

    B = ids.shape[0]
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    ckw = cache_kw(model, cache)
    toks: list[Tensor] = []
    done = torch.zeros(B, dtype=torch.bool, device=ids.device)
    with torch.inference_mode():
        if prefix:
            out, att = prefix_forward(model, ids, att, pos, prefix, cache, logits_to_keep=1)
        else:
            out = model(
                input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1, **ckw
            )
        last = pos[:, -1:]
        n_att = att.shape[1]
        att = torch.cat([att, torch.ones((B, max_new), dtype=att.dtype, device=att.device)], dim=1)
        for _ in range(max_new):
            nxt = pick(out.logits[:, -1].float())
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            toks.append(nxt)
            done = done | torch.isin(nxt, eos)
            if bool(done.all()):
                break
            n_att += 1
            last = last + 1
            out = model(
                input_ids=nxt[:, None],
                attention_mask=att[:, :n_att],
                position_ids=last,
                use_cache=True,
                **ckw,
            )
    return torch.cat([ids, torch.stack(toks, 1)], dim=1)


class TorchSampler:
    """Batched decoding from one model in this process: the raw loop (serving) and the engine's
    :class:`~opd_nb.engine.samplers.Sampler` (rollouts, validation answers, agentic completions)."""

    def __init__(self, model: Any, lean: Any, tok: Any, eos_ids: list[int], max_total: int, device: str):
        import torch

        self.torch = torch
        self.model, self.lean, self.tok = model, lean, tok
        self.eos_ids, self.max_total, self.device = eos_ids, max_total, device

    @classmethod
    def for_student(cls, models: Models, max_total: int) -> TorchSampler:
        """The sampler of a job's student (the registry's factory, :data:`opd_nb.engine.samplers.SAMPLERS`)."""
        return cls(models.student, models.s_lean, models.tok, models.eos_ids, max_total, models.device)

    def pad(self, prompt_ids: list[list[int]]) -> tuple[Any, Any]:
        return pad_prompts(self.torch, prompt_ids, self.tok.pad_token_id, self.device)

    def decode(
        self, ids: Any, att: Any, max_new: int, pick: Pick, eos: Any, share_prefix: bool = True
    ) -> Any:
        """Up to `max_new` tokens after left-padded prompts -> [B, P + generated] (rows padded after EOS).

        `share_prefix`: the prompts' common prefix (system prompt, template) runs once.
        """
        from opd_nb.engine.batch import SeqBatch, shared_prefix

        torch = self.torch
        pad = self.tok.pad_token_id
        k = 0
        if share_prefix:
            k = shared_prefix(SeqBatch(ids, att, torch.zeros_like(ids, dtype=torch.bool), ids[:, 0]), 0)
        if self.lean is not None:
            return self.lean.decode(ids, att, k, max_new, pick, eos, pad)
        return hf_decode(self.model, ids, att, k, max_new, pick, eos, pad)

    def complete(
        self,
        prompt_ids: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        max_new: int,
        lps: list[Tensor] | None = None,
        seeds: list[int] | None = None,
        decode_steps: int | None = None,
    ):
        """One batched decode -> (sequences [B, P+C], prompt attention [B, P], P, up-to-first-EOS mask, has EOS).

        `lps` (greedy only): filled with each decode step's log-prob of the chosen token, [B] per step.
        `seeds`: a random stream per row (:meth:`generate_ids`) instead of the job's global one.
        `decode_steps`: decode exactly this many steps (at most) instead of what the longest prompt leaves.
        """
        torch = self.torch
        ids, att = self.pad(prompt_ids)
        P = ids.shape[1]
        greedy = is_greedy(temperature, top_p)
        # the lean forward reads no module mode (no dropout); transformers' eval()/train() walk every
        # module and re-register kernels, 0.7 ms a generation step
        was_training = self.lean is None and self.model.training
        if self.lean is None:
            self.model.eval()
        n_new = decode_steps or max(1, min(max_new, self.max_total - P))
        draws = None if greedy or seeds is None else row_draws(torch, seeds, n_new, ids.device)
        pick = inverse_cdf_pick(torch, temperature, top_p, greedy, lps, draws, n_new)
        eos = torch.tensor(self.eos_ids, device=ids.device)
        out = self.decode(ids, att, n_new, pick, eos).clone()
        if was_training:
            self.model.train()
        comp = out[:, P:]
        is_eos = torch.zeros_like(comp, dtype=torch.bool)
        for e in self.eos_ids:
            is_eos |= comp == e
        before = (is_eos.cumsum(-1) - is_eos.long()) == 0  # tokens up to and including the first EOS
        return out, att, P, before, is_eos.any(-1)

    def generate_ids(
        self,
        prompt_ids: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        max_new: int | list[int],
        seeds: list[int] | None = None,
    ) -> list[tuple[list[int], bool]]:
        """Completion ids (incl. EOS when produced) and whether the row ended with EOS within its budget, per prompt.

        `max_new`: one budget for every row, or one per row. A row's budget is also cut to what its own
        prompt leaves of ``max_total``, never to what the batch's longest prompt leaves, and `seeds` (one
        per prompt) give each row a random stream of its own: so what a request samples does not depend
        on which other requests shared its batch.
        """
        wants = max_new if isinstance(max_new, list) else [max_new] * len(prompt_ids)
        budgets = [max(1, min(m, self.max_total - len(x))) for m, x in zip(wants, prompt_ids, strict=True)]
        out, _, P, before, has_eos = self.complete(
            prompt_ids,
            temperature=temperature,
            top_p=top_p,
            max_new=max(budgets),
            seeds=seeds,
            decode_steps=max(budgets),
        )
        from opd_nb.engine.batch import values

        lens: list[int] = values(before.sum(-1))
        rows: list[tuple[list[int], bool]] = []
        for j, budget in enumerate(budgets):
            n = min(lens[j], budget)  # the tokens after a row's budget were decoded for longer rows only
            rows.append((values(out[j, P : P + n]), bool(has_eos[j]) and lens[j] <= budget))
        return rows

    def generate(
        self, prompt_ids: list[list[int]], groups: list[int], *, temperature: float, logprobs: bool = False
    ) -> SeqBatch:
        """Native rollouts as a SeqBatch (temperature 0: greedy); completions are marked up to and including EOS.

        `logprobs` (greedy): keep the student's log-prob of each chosen token (``SeqBatch.logprobs``).
        """
        from opd_nb.engine.batch import SeqBatch, values

        torch = self.torch
        lps: list[Tensor] | None = [] if is_greedy(temperature, 1.0) and logprobs else None
        out, att, P, before, has_eos = self.complete(
            prompt_ids, temperature=temperature, top_p=1.0, max_new=self.max_total, lps=lps
        )
        tmask = torch.zeros_like(out, dtype=torch.bool)
        tmask[:, P:] = before
        att_full = torch.cat([att, before.long()], dim=1)
        lengths: list[int] = values(before.sum(-1))
        comp = out[:, P:]
        texts = self.tok.batch_decode(
            [comp[j, : lengths[j] - (1 if has_eos[j] else 0)].tolist() for j in range(len(prompt_ids))],
            skip_special_tokens=True,
        )
        b = SeqBatch(out, att_full, tmask, torch.tensor(groups, device=self.device), texts, ~has_eos)
        if lps:
            b.logprobs = torch.stack(lps, 1)  # [B, C]: the completion columns, which are the window
        return b
