"""Draft-then-verify speculative decoding on Hugging Face causal LMs with KV caches.

Sampling follows Leviathan et al. / Chen et al.: draft token x with draft probability q(x) and target
probability p(x) is accepted with probability min(1, p/q); at the first rejection a replacement is drawn
from norm(max(0, p - q)); when every draft token passes, the target adds a bonus token. Greedy mode
accepts a draft token iff it is the target's argmax. Both caches always hold every committed token but
the last one, which is fed again at the next step; rejected positions are cropped away.

Needs the ``profile`` extra (torch, transformers).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch


@dataclass
class StepRecord:
    context_len: int
    drafted: int
    accepted: int
    emitted: int


@dataclass
class DraftRecord:
    step: int
    pos: int
    q_token: float
    p_token: float
    accept_prob: float
    beta: float
    draft_entropy: float
    accepted: bool


@dataclass
class Generation:
    prompt_len: int
    tokens: list[int]  # generated tokens only
    steps: list[StepRecord] = field(default_factory=list)
    drafts: list[DraftRecord] = field(default_factory=list)


def _forward_kwarg(model) -> str:
    """transformers 5 calls the cache argument ``cache``; 4.x called it ``past_key_values``."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model):
    """An empty KV cache for ``model`` (transformers versions differ on whether it takes the config)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def crop_cache(cache, keep: int) -> None:
    """Keep the first ``keep`` positions. transformers 5 wants the negative count to remove
    (crop(-n)); 4.x takes the length to keep (crop(max_length)); both accept a negative count."""
    current = cache.get_seq_length()
    if keep < current:
        cache.crop(keep - current)


class CausalLM:
    """A model plus its KV cache and the number of positions the cache holds."""

    def __init__(self, model):
        self.model = model
        self.kwarg = _forward_kwarg(model)
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self):
        self.cache = new_cache(self.model)
        self.length = 0

    @torch.no_grad()
    def feed(self, ids: list[int], keep_last: int = 1) -> torch.Tensor:
        """Append ``ids`` to the cache; return logits (float64) of the last ``keep_last`` positions."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(self.length, self.length + len(ids), device=self.device)[None]
        out = self.model(
            input_ids=x, position_ids=pos, use_cache=True, logits_to_keep=keep_last, **{self.kwarg: self.cache}
        )
        self.length += len(ids)
        return out.logits[0, -keep_last:].to(torch.float64)

    def crop(self, keep: int) -> None:
        crop_cache(self.cache, keep)
        self.length = min(self.length, keep)


def distribution(logits: torch.Tensor, temperature: float, vocab: int, banned: list[int]) -> torch.Tensor:
    """Softmax over the shared vocabulary at ``temperature`` (1 for greedy confidence records)."""
    z = logits[..., :vocab] / temperature
    if banned:
        z = z.clone()
        z[..., banned] = float("-inf")
    return torch.softmax(z, dim=-1)


def _entropy(q: torch.Tensor) -> float:
    return float(-(q * torch.log(q.clamp_min(1e-300))).sum())


def speculative_generate(
    draft: CausalLM,
    target: CausalLM,
    prompt: list[int],
    *,
    d: int,
    max_new_tokens: int,
    greedy: bool,
    temperature: float = 1.0,
    min_new_tokens: int = 0,
    eos_ids: tuple[int, ...] = (),
    vocab: int | None = None,
    generator: torch.Generator | None = None,
) -> Generation:
    """Generate at least ``max_new_tokens`` tokens (the last step may overshoot by up to ``d``) or until
    an end-of-sequence token is emitted after ``min_new_tokens``; EOS is suppressed before that."""
    if d < 1:
        raise ValueError(f"draft length d must be >= 1, got {d}")
    temp = 1.0 if greedy else float(temperature)
    if temp <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    draft.reset()
    target.reset()
    vocab = vocab or min(draft.model.config.vocab_size, target.model.config.vocab_size)
    committed = list(prompt)
    n_prompt = len(prompt)
    gen = Generation(prompt_len=n_prompt, tokens=[])

    def banned(index: int) -> list[int]:
        return list(eos_ids) if index < min_new_tokens else []

    def pick(dist: torch.Tensor) -> int:
        if greedy:
            return int(torch.argmax(dist))
        return int(torch.multinomial(dist, 1, generator=generator))

    step = 0
    while len(committed) - n_prompt < max_new_tokens:
        ctx = len(committed)
        tokens, qs = [], []
        feed = committed[draft.length :]
        for j in range(d):
            q = distribution(draft.feed(feed)[-1], temp, vocab, banned(ctx + j - n_prompt))
            tok = pick(q)
            tokens.append(tok)
            qs.append(q)
            feed = [tok]
        logits = target.feed(committed[target.length :] + tokens, keep_last=d + 1)
        ps = [distribution(logits[j], temp, vocab, banned(ctx + j - n_prompt)) for j in range(d + 1)]

        n_acc, new_token = d, None
        for j, (tok, q, p) in enumerate(zip(tokens, qs, ps, strict=False)):
            if greedy:
                ok = tok == int(torch.argmax(p))
            else:
                u = float(torch.rand((), generator=generator, dtype=torch.float64))
                ok = u * float(q[tok]) < float(p[tok])
            if not ok:
                n_acc = j
                if greedy:
                    new_token = int(torch.argmax(p))
                else:
                    residual = (p - q).clamp_min(0)
                    total = float(residual.sum())
                    new_token = pick(residual / total) if total > 0 else pick(p)
                break
        if new_token is None:
            new_token = pick(ps[d])
        for j, (tok, q, p) in enumerate(zip(tokens, qs, ps, strict=False)):
            qt, pt = float(q[tok]), float(p[tok])
            gen.drafts.append(
                DraftRecord(
                    step, j + 1, qt, pt, min(1.0, pt / qt), float(torch.minimum(p, q).sum()), _entropy(q), j < n_acc
                )
            )
        emitted = tokens[:n_acc] + [new_token]
        gen.steps.append(StepRecord(ctx, d, n_acc, len(emitted)))
        committed += emitted
        gen.tokens += emitted
        keep = len(committed) - 1
        target.crop(keep)
        draft.crop(keep)
        step += 1
        if new_token in eos_ids and len(gen.tokens) >= min_new_tokens:
            break
    return gen


@dataclass
class PositionRecords:
    match: list[bool]
    beta: list[float]
    draft_top1: list[float]
    draft_entropy: list[float]


@torch.no_grad()
def teacher_forced(
    draft: CausalLM,
    target: CausalLM,
    prompt: list[int],
    generated: list[int],
    *,
    min_new_tokens: int = 0,
    eos_ids: tuple[int, ...] = (),
    vocab: int | None = None,
) -> PositionRecords:
    """One pass of each model over prompt + generated: per generated position, does the draft's argmax
    equal the target's, beta = sum min(p, q), the draft's top-1 probability and entropy (temperature 1)."""
    vocab = vocab or min(draft.model.config.vocab_size, target.model.config.vocab_size)
    ids = list(prompt) + list(generated[:-1])
    n = len(generated)
    out = PositionRecords([], [], [], [])
    draft.reset()
    target.reset()
    ld = draft.feed(ids, keep_last=n)
    lt = target.feed(ids, keep_last=n)
    for i in range(n):
        ban = list(eos_ids) if i < min_new_tokens else []
        q = distribution(ld[i], 1.0, vocab, ban)
        p = distribution(lt[i], 1.0, vocab, ban)
        out.match.append(int(torch.argmax(q)) == int(torch.argmax(p)))
        out.beta.append(float(torch.minimum(p, q).sum()))
        out.draft_top1.append(float(q.max()))
        out.draft_entropy.append(_entropy(q))
    draft.reset()
    target.reset()
    return out
