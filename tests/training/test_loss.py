"""The PPO loss on a 2 x 3 token grid whose values are worked out by hand."""

import math

import pytest
import torch

from training.loss import LossConfig, adapt_entropy_coef, floor_coef_at, k3, policy_loss

# seq 0: A = +1, ratios 1.5, 0.5, 1.0 (3 tokens); seq 1: A = -1, ratios 3.0, 0.5 (2 tokens + pad)
RATIOS = [[1.5, 0.5, 1.0], [3.0, 0.5, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -1.0])
# clip 0.2: seq 0 pg = max(-A r, -A clip(r)) = [-1.2 (clipped), -0.5, -1.0]
#           seq 1 pg = [max(3.0, 1.2) = 3.0, max(0.5, 0.8) = 0.8 (clipped)]


def grid():
    old = torch.zeros(2, 3)
    logp = torch.tensor(RATIOS).log().requires_grad_(True)
    return logp, old


def test_clip_and_aggregations():
    logp, old = grid()
    loss, m = policy_loss(logp, old, ADV, MASK, LossConfig(aggregation="token_mean"))
    assert loss.item() == pytest.approx((-1.2 - 0.5 - 1.0 + 3.0 + 0.8) / 5)  # 0.22
    assert m["clip_frac"] == pytest.approx(2 / 5)
    assert m["ratio_min"] == pytest.approx(0.5) and m["ratio_max"] == pytest.approx(3.0)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.0 + 3.0 + 0.5) / 5)
    loss.backward()
    # unclipped tokens: d/dlogp (-A r)/5 = -A r / 5; clipped tokens: 0; padding: 0
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.1, -0.2, 0.6, 0.0, 0.0])

    loss, _ = policy_loss(logp, old, ADV, MASK, LossConfig(aggregation="seq_mean_token_mean"))
    assert loss.item() == pytest.approx(((-2.7 / 3) + (3.8 / 2)) / 2)  # (-0.9 + 1.9)/2 = 0.5
    loss, _ = policy_loss(
        logp, old, ADV, MASK, LossConfig(aggregation="seq_mean_token_sum_norm", norm_constant=4)
    )
    assert loss.item() == pytest.approx(1.1 / (2 * 4))


def test_dual_clip_bounds_negative_advantages():
    logp, old = grid()
    loss, m = policy_loss(logp, old, ADV, MASK, LossConfig(aggregation="token_mean", dual_clip=2.0))
    # seq 1 token 0: pg 3.0 > c * |A| = 2 -> 2; everything else unchanged
    assert loss.item() == pytest.approx((-2.7 + 2.0 + 0.8) / 5)
    assert m["dual_clip_frac"] == pytest.approx(1 / 5)
    assert m["clip_frac"] == pytest.approx(2 / 5)
    loss.backward()
    assert logp.grad[1, 0].item() == 0.0  # the dual-clipped token passes no gradient


def test_k3_kl_and_entropy_terms():
    logp, old = grid()
    # ref - new = ln 2 on seq 0 token 0 (k3 = 2 - ln2 - 1), 0 elsewhere
    ref = logp.detach().clone()
    ref[0, 0] += math.log(2.0)
    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])  # the padded 100 must not count
    cfg = LossConfig(aggregation="token_mean", kl_coef=0.5, entropy_coef=0.1)
    loss, m = policy_loss(logp, old, ADV, MASK, cfg, ref_logp=ref, entropy=ent)
    kl = 1 - math.log(2.0)
    assert k3(torch.tensor(0.0), torch.tensor(math.log(2.0))).item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(0.22 + 0.5 * kl / 5 - 0.1 * 15 / 5)
    assert m["kl_ref"] == pytest.approx(kl / 5) and m["entropy"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, old, ADV, MASK, cfg)


def test_floor_coef_decays_linearly_to_its_final_weight():
    cfg = LossConfig(floor_coef=0.3, floor_decay_steps=10, floor_coef_final=0.05)
    assert [round(floor_coef_at(s, cfg), 6) for s in (0, 5, 10, 50)] == [0.3, 0.175, 0.05, 0.05]
    assert floor_coef_at(1000, LossConfig(floor_coef=0.3)) == 0.3  # no decay: fixed
    with pytest.raises(ValueError, match="floor_decay_steps"):
        LossConfig(floor_decay_steps=-1)


def test_floor_off_step_drops_the_floor_to_zero_at_that_optimizer_step():
    cfg = LossConfig(floor_coef=0.3, floor_decay_steps=10, floor_coef_final=0.05, floor_off_step=20)
    assert [round(floor_coef_at(s, cfg), 6) for s in (0, 5, 19, 20, 50)] == [
        0.3,
        0.175,
        0.05,
        0.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="floor_off_step must be >= 0"):
        LossConfig(floor_off_step=-1)


def test_probability_floor_term():
    logp, old = grid()
    floor = torch.tensor([[0.5, 1.0, 1.5], [2.0, 0.0, 100.0]])  # the padded 100 must not count
    base, _ = policy_loss(logp, old, ADV, MASK, LossConfig(aggregation="token_mean"))
    loss, m = policy_loss(
        logp, old, ADV, MASK, LossConfig(aggregation="token_mean", floor_coef=0.2), floor=floor
    )
    assert loss.item() == pytest.approx(base.item() + 0.2 * 5.0 / 5)
    assert m["uniform_kl"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="floor"):
        policy_loss(logp, old, ADV, MASK, LossConfig(floor_coef=0.2))
    with pytest.raises(ValueError, match="floor_coef"):
        LossConfig(floor_coef=-0.1)


@pytest.mark.parametrize(
    "aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
)
def test_micro_batches_sum_to_the_full_batch(aggregation):
    logp, old = grid()
    cfg = LossConfig(aggregation=aggregation, norm_constant=4)
    full, _ = policy_loss(logp, old, ADV, MASK, cfg)
    parts = [
        policy_loss(
            logp[i : i + 1],
            old[i : i + 1],
            ADV[i : i + 1],
            MASK[i : i + 1],
            cfg,
            num_tokens=5,
            num_seqs=2,
        )[0]
        for i in range(2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item())


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="aggregation"):
        LossConfig(aggregation="sum")
    with pytest.raises(ValueError, match="dual_clip"):
        LossConfig(dual_clip=0.5)
    with pytest.raises(ValueError, match="entropy_target"):
        LossConfig(entropy_target=-0.1)


def test_adaptive_entropy_coefficient_moves_towards_the_target_within_bounds():
    cfg = LossConfig(
        entropy_coef=0.01, entropy_target=0.3, entropy_coef_step=0.002, entropy_coef_max=0.012
    )
    assert adapt_entropy_coef(0.01, 0.1, cfg) == pytest.approx(0.012)  # collapsing: more bonus
    assert adapt_entropy_coef(0.01, 0.5, cfg) == pytest.approx(0.008)  # above target: less
    assert adapt_entropy_coef(0.012, 0.1, cfg) == pytest.approx(0.012)  # ceiling
    assert adapt_entropy_coef(0.001, 0.5, cfg) == 0.0  # floor
    assert adapt_entropy_coef(0.01, 0.1, LossConfig(entropy_coef=0.01)) == 0.01  # no target: fixed
