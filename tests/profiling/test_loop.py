import numpy as np
import pytest
from scipy import stats

from tests.profiling.conftest import VOCAB, perturbed, tiny_llama

torch = pytest.importorskip("torch")
from adsl.profiling.loop import CausalLM, speculative_generate, teacher_forced  # noqa: E402

PROMPT = [0, 5, 9, 13, 7, 22, 3]


def test_draft_equal_to_target_accepts_everything(target_model):
    m = CausalLM(target_model)
    for greedy in (True, False):
        g = speculative_generate(
            m,
            CausalLM(target_model),
            PROMPT,
            d=4,
            max_new_tokens=20,
            greedy=greedy,
            generator=torch.Generator().manual_seed(3),
        )
        assert all(s.accepted == s.drafted == 4 and s.emitted == 5 for s in g.steps)
        assert all(abs(r.accept_prob - 1) < 1e-12 and abs(r.beta - 1) < 1e-9 for r in g.drafts)


def test_greedy_speculative_equals_target_greedy_generate(target_model, draft_model):
    g = speculative_generate(CausalLM(draft_model), CausalLM(target_model), PROMPT, d=3, max_new_tokens=30, greedy=True)
    ref = target_model.generate(
        torch.tensor([PROMPT]), max_new_tokens=len(g.tokens), do_sample=False, eos_token_id=None, pad_token_id=2
    )[0, len(PROMPT) :].tolist()
    assert g.tokens == ref


def test_perturbed_draft_gives_partial_acceptance(target_model, draft_model):
    g = speculative_generate(CausalLM(draft_model), CausalLM(target_model), PROMPT, d=4, max_new_tokens=60, greedy=True)
    rate = sum(s.accepted for s in g.steps) / sum(s.drafted for s in g.steps)
    assert 0.05 < rate < 0.95
    assert sum(s.emitted for s in g.steps) == len(g.tokens) >= 60


def test_teacher_forced_replay_reproduces_greedy_steps(target_model, draft_model):
    d = 4
    draft, target = CausalLM(draft_model), CausalLM(target_model)
    g = speculative_generate(draft, target, PROMPT, d=d, max_new_tokens=50, greedy=True)
    rec = teacher_forced(draft, target, PROMPT, g.tokens)
    match = np.array(rec.match)
    i, replayed = 0, []
    while i < len(g.tokens):
        run = 0
        while run < d and i + run < len(match) and match[i + run]:
            run += 1
        replayed.append(run)
        i += run + 1
    assert replayed == [s.accepted for s in g.steps]


def test_sampling_emits_the_target_distribution():
    """Chi-square: the first emitted token, over many seeds, follows the target's distribution."""
    target = tiny_llama(5, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(1 / 8.0 / 2)  # a broad target distribution over the small vocabulary
    draft = perturbed(target, 1.0, 9)
    t, dm = CausalLM(target), CausalLM(draft)
    n = 1500
    counts = np.zeros(VOCAB)
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        g = speculative_generate(dm, t, PROMPT, d=2, max_new_tokens=1, greedy=False, generator=gen)
        counts[g.tokens[0]] += 1
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([PROMPT])).logits[0, -1].double(), -1).numpy()
    keep = p * n >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(p[keep] * n, p[~keep].sum() * n)
    if expected[-1] < 5:
        observed, expected = observed[:-1], expected[:-1] * observed[:-1].sum() / expected[:-1].sum()
    assert stats.chisquare(observed, expected).pvalue > 0.001
