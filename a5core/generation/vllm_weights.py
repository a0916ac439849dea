"""The vLLM backend's weight update and its exact check, run inside each engine worker through `collective_rpc`.

- `weights` is a `distributed.WholeState`: names and whole shapes known up front, tensors produced as it is iterated
  (under fsdp2 each one gathered by `full_tensor()` then, so no whole copy of the policy is ever held). Each function
  here iterates it once, in order; a rank's engine consumes it exactly as every other rank's does.
- `reload_on_worker`: refuses an update that lacks a tensor some engine parameter is built from (nothing is loaded
  then: vLLM processes a fused projection loaded in part with its other rows left as fresh, unset memory, and lists
  nothing as not loaded), loads the rest in place through vLLM's reload path, and returns the engine parameters it
  did not reach. vLLM only logs those ("Following weights were not loaded from checkpoint"; a layer that got
  nothing keeps its old tensors; 0.26 logs it from its GPU model runner, 0.32/0.33 from the reload modules); here
  the loaded-names set `model.load_weights` returns and that log record both count.
- `compare_on_worker`: each engine parameter against what the policy says it holds: the same-named tensor, the rows
  of q/k/v (`qkv_proj`) or gate/up (`gate_up_proj`) in that order, or the leading rows of an embedding whose
  vocabulary vLLM padded (to a multiple of 64). The CPU build repacks every linear layer's weight into its GEMM kernel
  and leaves a (0,)-shaped parameter: those hold nothing to compare (only the norms, embeddings and biases do there).
- `required_compared`: how many a layout must compare (see there).
Departs from vLLM: nothing; vLLM checks none of this.
"""

from __future__ import annotations

import contextlib
import itertools
import logging

import torch

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
PADDED = ("embed_tokens.weight", "lm_head.weight")  # vLLM pads the vocabulary dimension of these
# the loggers whose records say what a reload did not load: 0.32/0.33's reload modules; 0.26's GPU model runner
LOADER_LOGGERS = ("vllm.model_executor.model_loader", "vllm.v1.worker")


def sources(name: str, have) -> list[str] | None:
    """The policy tensors engine parameter `name` is built from, in the engine's row order (None: no counterpart);
    `have`: the policy's tensor names."""
    if name in have:
        return [name]
    for fused, parts in FUSED.items():
        token = f".{fused}."
        if token in name:
            # vLLM's stacked_params_mapping writes the shards in this order along dim 0 (tensor parallel size 1)
            names = [name.replace(token, f".{part}.") for part in parts]
            return names if all(n in have for n in names) else None
    return None


def _fits(engine: torch.Tensor, name: str, want: torch.Size) -> bool:
    if engine.shape == want:
        return True
    padded = name.endswith(PADDED) and engine.ndim == len(want) and engine.shape[0] >= want[0]
    return padded and engine.shape[1:] == want[1:]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        # not layerwise's "<Layer>: Failed to load weights": RotaryEmbedding logs it on every reload (its buffer is
        # never in a checkpoint); a layer's unloaded parameters are in this message and in the names set anyway
        if "weights were not loaded" in message:
            self.messages.append(message)


@contextlib.contextmanager
def _loader_warnings():
    """The reload's 'not loaded' warnings, whatever VLLM_LOGGING_LEVEL says (the level is lowered to WARNING
    for the reload: a handler never sees a record its logger's level drops)."""
    handler = _Collect()
    loggers = [logging.getLogger(name) for name in LOADER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if not logger.isEnabledFor(logging.WARNING):
            logger.setLevel(logging.WARNING)
    try:
        yield handler.messages
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


@contextlib.contextmanager
def _loaded_names(model):
    """The names `model.load_weights` reports loaded during the block (None when it returns nothing)."""
    original, seen = model.load_weights, {"names": None}

    def recording(*args, **kwargs):
        names = original(*args, **kwargs)
        if names is not None:
            seen["names"] = (seen["names"] or set()) | set(names)
        return names

    model.load_weights = recording  # an instance attribute shadows the method for vLLM's reload call
    try:
        yield seen
    finally:
        del model.load_weights


def _reload(worker, weights) -> None:
    """vLLM 0.26 to 0.33 have `Worker.reload_weights` (0.32/0.33 enter the engine's config context there, 0.26 does
    not: it is entered here, as the layerwise reload's weight processing reads the current config; the CPU worker
    inherits it); vLLM >= 0.11 has `model_runner.reload_weights`; before it, `model.load_weights` was the way."""
    if hasattr(worker, "reload_weights"):
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(worker.vllm_config):
            worker.reload_weights(weights_iterator=iter(weights))
    elif hasattr(worker.model_runner, "reload_weights"):  # pragma: no cover - vLLM 0.11 to 0.31
        worker.model_runner.reload_weights(weights_iterator=iter(weights))
    else:  # pragma: no cover - older vLLM
        worker.model_runner.model.load_weights(weights=weights)


def reload_on_worker(worker, weights) -> dict[str, list[str]]:
    """Load `weights` (a WholeState) in place: {"absent": engine parameters the update has no tensor for (then
    nothing was loaded), "not_loaded": what vLLM did not load (`load_and_report`)}."""
    # get_model(): on CUDA `model_runner.model` may be a CUDA-graph wrapper; the reload works on the raw model
    names = [name for name, _ in worker.model_runner.get_model().named_parameters()]
    absent = sorted(name for name in names if sources(name, weights.shapes) is None)
    if absent:
        return {"absent": absent, "not_loaded": []}
    return {"absent": [], "not_loaded": load_and_report(worker, weights)}


def load_and_report(worker, weights) -> list[str]:
    """Reload `weights` in place; returns the engine parameters `model.load_weights` did not report loaded, then
    vLLM's warnings about weights it did not load."""
    model = worker.model_runner.get_model()
    with _loader_warnings() as messages, _loaded_names(model) as seen:
        _reload(worker, weights)
    missing = set() if seen["names"] is None else {n for n, _ in model.named_parameters()} - seen["names"]
    return sorted(missing) + messages


def compare_on_worker(worker, weights) -> dict[str, list[str]]:
    """{"compared", "differ", "repacked", "unmatched"}: names of engine parameters compared with the policy's tensor,
    those of them not equal to it cast to the engine's dtype, those repacked away (numel 0), those without a
    counterpart of a fitting shape. `weights` (a WholeState) is iterated once; each tensor is compared with the rows
    it fills and dropped."""
    out: dict[str, list[str]] = {"compared": [], "differ": [], "repacked": [], "unmatched": []}
    engine = dict(worker.model_runner.get_model().named_parameters())
    rows: dict[str, list[tuple[str, int]]] = {}  # policy tensor -> [(engine parameter, its first row there)]
    for name, param in engine.items():
        src = sources(name, weights.shapes) if param.numel() else None
        if param.numel() == 0:
            out["repacked"].append(name)
        elif src is None or not _fits(param, name, _stacked(src, weights.shapes)):
            out["unmatched"].append(name)
        else:
            out["compared"].append(name)
            firsts = itertools.accumulate((weights.shapes[s][0] for s in src), initial=0)
            for s, first in zip(src, firsts):
                rows.setdefault(s, []).append((name, first))
    differ = set()
    for policy_name, tensor in weights:
        for name, first in rows.get(policy_name, ()):
            got = engine[name].detach()[first : first + tensor.shape[0]]  # vocabulary padding rows: not the policy's
            if not torch.equal(got, tensor.to(device=got.device, dtype=got.dtype)):
                differ.add(name)
    out["differ"] = sorted(differ)
    return out


def _stacked(src: list[str], shapes: dict) -> torch.Size:
    """The shape of the policy tensors `src` stacked along dim 0 (what a fused engine parameter holds)."""
    return torch.Size([sum(shapes[s][0] for s in src), *shapes[src[0]][1:]])


def required_compared(layout: str, parameters: int, repacked: int) -> int:
    """The fewest engine parameters the exact check of `layout` must compare. On CUDA (one_gpu, two_gpu) every one:
    vLLM keeps unquantized weights as loaded there, fused or not. On the CPU every one not repacked, and at least 2
    (an embedding and a norm: every decoder-only model has them; the CPU build repacks only linear layers)."""
    if layout == "cpu":
        return max(2, parameters - repacked)
    return parameters
