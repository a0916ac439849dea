"""`derive_seed(seed, *keys)`: the one way a run's seed becomes the seed of one use (a draw, a stream, an order).

- Every random draw in a5 takes its seed from here, keyed by what it draws and for which step/round/request:
  `derive_seed(cfg.seed, "grpo_questions", step)`, `derive_seed(sampling.seed, "request", i, j)`.
- Distinct keys give unrelated seeds (a hash, not arithmetic: `seed * 1000 + round` collides with the seed + 1's
  round - 1000), and the same keys give the same seed on every machine and Python (blake2b, not `hash()`), so a
  resumed run redraws exactly what it drew before.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 63  # fits torch.Generator, random.Random and vLLM's int64 seeds


def derive_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed for the use named by `keys` (strings and ints) of the base `seed`."""
    if not all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in (seed, *keys)):
        raise TypeError(f"derive_seed takes ints and strings, got {(seed, *keys)!r}")
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)
