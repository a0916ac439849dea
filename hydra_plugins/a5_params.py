"""Hydra plugin: an `-S` override of a key that params.yaml does not have ends in one line naming the closest key.

DVC composes params.yaml with Hydra (`dvc exp run -S grpo.lr=3e-6`, `.dvc/config` [hydra]) and scans this folder for
Hydra plugins (DVC's `hydra.plugins_path`, the repository root by default); `tools.profile` composes the same way.
Hydra refuses such a key with a four-line struct error that names no alternative; this module checks every plain
override (no `+`, `++` or `~`) before Hydra applies it and refuses an unknown key with
`unknown param 'grpo.learnig_rate': did you mean grpo.lr? ...` instead (the suggestion: `a5core.base.typed.closest`).
Everything else is Hydra's own behaviour.
"""

from __future__ import annotations

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig

from a5core.base.typed import closest


def missing_key(cfg: DictConfig, key: str) -> str | None:
    """The one-line refusal of `key` (a dotted path) when `cfg` lacks it, or None when it exists."""
    node, done = cfg, []
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            known = [str(k) for k in node] if isinstance(node, DictConfig) else []
            where = ".".join(done)
            guess = closest(part, known)
            hint = f"did you mean {'.'.join([*done, guess])}?" if guess else f"{where or 'params'} has {known}"
            return f"unknown param {key!r}: {hint} (params.yaml lists every param)"
        node, done = node._get_node(part), [*done, part]
    return None


ORIGINAL = "_a5_original_apply"  # Hydra's own method, kept on its class: this module may run twice in one process


def _apply_checked(overrides, cfg: DictConfig) -> None:
    for override in overrides:
        plain = not (override.is_add() or override.is_force_add() or override.is_delete())
        problem = missing_key(cfg, override.key_or_group) if plain and override.package is None else None
        if problem:
            raise ConfigCompositionException(problem)
    getattr(ConfigLoaderImpl, ORIGINAL)(overrides, cfg)


if not hasattr(ConfigLoaderImpl, ORIGINAL):  # once per process (Hydra's plugin scan runs this module again)
    setattr(ConfigLoaderImpl, ORIGINAL, ConfigLoaderImpl._apply_overrides_to_config)
    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(_apply_checked)
