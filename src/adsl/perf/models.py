"""Transformer decoder architectures as typed, frozen records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adsl.config import catalogue_schema, read_yaml, validate
from adsl.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_dim: int
    gated_ffn: bool
    activation: str
    vocab: int
    bytes_per_param: int

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def gqa_group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def params_per_layer(self) -> int:
        attn = self.d_model * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.d_model
        ffn = (3 if self.gated_ffn else 2) * self.d_model * self.ffn_dim
        return attn + ffn

    @property
    def params(self) -> int:
        """Decoder layers plus the LM head; the embedding table is the same size and is counted
        for memory capacity (weight_bytes), not for per-token traffic."""
        return self.layers * self.params_per_layer + self.vocab * self.d_model

    @property
    def weight_bytes(self) -> int:
        return (self.params + self.vocab * self.d_model) * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_dim * self.bytes_per_param


@dataclass(frozen=True)
class Pair:
    name: str
    target: ModelSpec
    draft: ModelSpec


@dataclass(frozen=True)
class ModelCatalogue:
    models: dict[str, ModelSpec]
    pairs: dict[str, Pair]

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise KeyError(f"unknown model {name!r}; known: {sorted(self.models)}")
        return self.models[name]

    def pair(self, name: str) -> Pair:
        if name not in self.pairs:
            raise KeyError(f"unknown pair {name!r}; known: {sorted(self.pairs)}")
        return self.pairs[name]


def load_models(path: str | Path) -> ModelCatalogue:
    """The model catalogue of a YAML file, checked: kv_heads divide heads, pairs name known models and a
    draft smaller than its target."""
    raw = validate(read_yaml(path), catalogue_schema("models_file"), str(path), fill_defaults=False)
    models = {}
    for name, m in raw["models"].items():
        if m["heads"] % m["kv_heads"]:
            raise ConfigError(str(path), f"models.{name}.kv_heads", "must divide heads")
        models[name] = ModelSpec(name=name, **m)
    pairs = {}
    for name, p in raw["pairs"].items():
        for role in ("target", "draft"):
            if p[role] not in models:
                raise ConfigError(
                    str(path), f"pairs.{name}.{role}", f"unknown model {p[role]!r}; known: {sorted(models)}"
                )
        target, draft = models[p["target"]], models[p["draft"]]
        if draft.params >= target.params:  # speculation pays only when drafting is cheaper than verifying
            raise ConfigError(
                str(path),
                f"pairs.{name}.draft",
                f"{draft.name} ({draft.params / 1e9:.3g}B parameters) is not smaller than its target {target.name} "
                f"({target.params / 1e9:.3g}B); allowed: a draft smaller than its target",
            )
        pairs[name] = Pair(name, target, draft)
    return ModelCatalogue(models, pairs)
