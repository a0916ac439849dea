import math

import torch

from a5core.handout import compute_per_instance_dpo_loss
from a5core.rl.dpo import dpo_loss_from_log_probs


def test_dpo_equal_policies_is_log2(tiny):
    model, tok = tiny
    loss = compute_per_instance_dpo_loss(model, model, tok, 0.5, "Compute 1+1.", "2", "3")
    assert abs(float(loss) - math.log(2)) < 1e-5


def test_dpo_prefers_raising_chosen():
    ref = torch.tensor(-5.0)
    base = dpo_loss_from_log_probs(torch.tensor(-5.0), torch.tensor(-5.0), ref, ref, 0.1)
    better = dpo_loss_from_log_probs(torch.tensor(-4.0), torch.tensor(-5.0), ref, ref, 0.1)
    assert float(better) < float(base)


def test_dpo_finite_for_huge_margins():
    z = torch.tensor(0.0)
    for m in (1e4, -1e4):
        loss = dpo_loss_from_log_probs(torch.tensor(m), z, z, z, 1.0)
        assert torch.isfinite(loss)
    assert float(dpo_loss_from_log_probs(torch.tensor(-1e4), z, z, z, 1.0)) == 1e4
