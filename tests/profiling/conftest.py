"""Tiny random Llama models in float64 (no downloads) for the speculative-decoding tests."""

import pytest

VOCAB = 48


def tiny_llama(seed: int, layers: int = 2):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(cfg).to(torch.float64).eval()
    # Sharpen the output layer so greedy drafts agree often enough to exercise long accepts.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def perturbed(model, scale: float, seed: int):
    import copy

    import torch

    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return other


@pytest.fixture(scope="session")
def target_model():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def draft_model(target_model):
    return perturbed(target_model, 0.3, 1)
