"""Where models come from: a hub id, a local folder, a local GGUF file, or an offline GGUF name."""

from __future__ import annotations

import os
from pathlib import Path

from adsl.errors import AdslError
from adsl.profiling.offline_models import OFFLINE_GGUF, assemble

DTYPES = ("float32", "float16", "bfloat16", "float64")


class PairError(AdslError, ValueError):
    """Raised when a draft and a target cannot be paired: their tokenizers differ."""

    pass


def resolve_source(source: str) -> tuple[str, dict]:
    """(from_pretrained path or id, extra keyword arguments) for a model source string."""
    if source.startswith("offline:"):
        path = assemble(source.removeprefix("offline:"))
        return str(path.parent), {"gguf_file": path.name}
    if source in OFFLINE_GGUF:
        path = assemble(source)
        return str(path.parent), {"gguf_file": path.name}
    p = Path(source)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FileNotFoundError(f"GGUF file not found: {p}")
        return str(p.resolve().parent), {"gguf_file": p.name}
    return source, {}


def load_model(source: str, device: str = "cpu", dtype: str = "float32", offline: bool = True):
    """Model and tokenizer; ``offline`` sets HF_HUB_OFFLINE=1 so nothing is fetched from the hub."""
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: allowed {DTYPES}")
    where, extra = resolve_source(source)
    tok = AutoTokenizer.from_pretrained(where, **extra)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=getattr(torch, dtype), **extra)
    return model.to(device).eval(), tok


def check_same_tokenizer(draft_tok, target_tok, draft_name: str, target_name: str) -> None:
    """Raise PairError unless draft and target share one vocabulary (verification compares token ids)."""
    if draft_tok.get_vocab() != target_tok.get_vocab():
        raise PairError(
            f"draft {draft_name!r} and target {target_name!r} have different tokenizers; "
            "speculative decoding needs one shared vocabulary"
        )
