import copy

import pytest
import torch

from a5core.model.loading import build_tiny_model


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): a tiny random Llama and a BPE tokenizer trained on synthetic math text."""
    torch.manual_seed(0)
    model, tok = build_tiny_model(seed=0)
    return model, tok


@pytest.fixture(scope="session")
def sharp(tiny):
    """The tiny model with weights scaled up (eval mode), so greedy outputs vary from token to token and a weight
    change moves its log-probs far more than floating-point noise."""
    model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)
    return model.eval(), tiny[1]


LONGEST_FIRST = ("test_smoke_dag.py", "test_distributed_dag.py", "test_full_mini.py", "test_gpu_sequence.py")


def pytest_collection_modifyitems(items):
    """The longest modules first (`--durations` of CI runs), then the other slow tests, then the rest: with `-n 2`
    the longest start at once instead of ending the run on one worker."""

    def rank(item) -> tuple[int, int]:
        name = item.path.name
        longest = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        return longest, 0 if item.get_closest_marker("slow") else 1

    items.sort(key=rank)
