"""The vLLM backend's weight update and its exact check, run inside each engine worker through `collective_rpc`.

- `reload_on_worker`: refuses an update that lacks a tensor some engine parameter is built from (nothing is loaded
  then: vLLM processes a fused projection loaded in part with its other rows left as fresh, unset memory, and lists
  nothing as not loaded), loads the rest in place through vLLM's reload path, and returns the engine parameters it
  did not reach. vLLM only logs those ("Following weights were not loaded from checkpoint"; a layer that got
  nothing keeps its old tensors); here the loaded-names set `model.load_weights` returns and that log record both
  count.
- `compare_on_worker`: each engine parameter against what the policy says it holds: the same-named tensor,
  `torch.cat` of q/k/v (`qkv_proj`) or gate/up (`gate_up_proj`), or the leading rows of an embedding whose vocabulary
  vLLM padded (to a multiple of 64). The CPU build repacks every linear layer's weight into its GEMM kernel and
  leaves a (0,)-shaped parameter: those hold nothing to compare (only the norms, embeddings and biases do there).
- `required_compared`: how many a layout must compare (see there).
Departs from vLLM: nothing; vLLM checks none of this.
"""

from __future__ import annotations

import contextlib
import logging

import torch

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
PADDED = ("embed_tokens.weight", "lm_head.weight")  # vLLM pads the vocabulary dimension of these
LOADER_LOGGER = "vllm.model_executor.model_loader"  # its reload modules log what did not load


def expected_tensor(name: str, policy: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """What engine parameter `name` must hold according to the policy's tensors (None: no counterpart)."""
    if name in policy:
        return policy[name]
    for fused, parts in FUSED.items():
        token = f".{fused}."
        if token in name:
            pieces = [policy.get(name.replace(token, f".{part}.")) for part in parts]
            # vLLM's stacked_params_mapping writes the shards in this order along dim 0 (tensor parallel size 1)
            return torch.cat(pieces, dim=0) if all(p is not None for p in pieces) else None
    return None


def _fits(engine: torch.Tensor, name: str, want: torch.Tensor) -> bool:
    if engine.shape == want.shape:
        return True
    padded = name.endswith(PADDED) and engine.ndim == want.ndim and engine.shape[0] >= want.shape[0]
    return padded and engine.shape[1:] == want.shape[1:]


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
    logger, handler = logging.getLogger(LOADER_LOGGER), _Collect()
    level = logger.level
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
    try:
        yield handler.messages
    finally:
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
    """vLLM 0.32/0.33 have `Worker.reload_weights` (the runner's, under the engine's config context; the CPU worker
    inherits it); vLLM >= 0.11 has `model_runner.reload_weights`; before it, `model.load_weights` was the way."""
    if hasattr(worker, "reload_weights"):
        worker.reload_weights(weights_iterator=iter(weights))
    elif hasattr(worker.model_runner, "reload_weights"):  # pragma: no cover - vLLM 0.11 to 0.31
        worker.model_runner.reload_weights(weights_iterator=iter(weights))
    else:  # pragma: no cover - older vLLM
        worker.model_runner.model.load_weights(weights=weights)


def reload_on_worker(worker, weights) -> dict[str, list[str]]:
    """Load `weights` [(name, tensor)] in place: {"absent": engine parameters the update has no tensor for (then
    nothing was loaded), "not_loaded": what vLLM did not load (`load_and_report`)}."""
    # get_model(): on CUDA `model_runner.model` may be a CUDA-graph wrapper; the reload works on the raw model
    policy = dict(weights)
    names = [name for name, _ in worker.model_runner.get_model().named_parameters()]
    absent = sorted(name for name in names if expected_tensor(name, policy) is None)
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
    counterpart of a fitting shape."""
    policy = dict(weights)
    out: dict[str, list[str]] = {"compared": [], "differ": [], "repacked": [], "unmatched": []}
    for name, engine in worker.model_runner.get_model().named_parameters():
        if engine.numel() == 0:
            out["repacked"].append(name)
            continue
        want = expected_tensor(name, policy)
        if want is None or not _fits(engine, name, want):
            out["unmatched"].append(name)
            continue
        out["compared"].append(name)
        got = engine.detach()[: want.shape[0]]  # vocabulary padding rows hold nothing of the policy's
        if not torch.equal(got, want.to(device=engine.device, dtype=engine.dtype)):
            out["differ"].append(name)
    return out


def required_compared(layout: str, parameters: int, repacked: int) -> int:
    """The fewest engine parameters the exact check of `layout` must compare. On CUDA (one_gpu, two_gpu) every one:
    vLLM keeps unquantized weights as loaded there, fused or not. On the CPU every one not repacked, and at least 2
    (an embedding and a norm: every decoder-only model has them; the CPU build repacks only linear layers)."""
    if layout == "cpu":
        return max(2, parameters - repacked)
    return parameters
