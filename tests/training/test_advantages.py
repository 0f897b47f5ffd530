"""Every advantage estimator on a small example whose numbers are worked out by hand."""

import math

import numpy as np
import pytest

from core.records import MatchRecord, TurnRecord, outcomes
from training.advantages import (
    ESTIMATORS,
    AdvantageConfig,
    compute_advantages,
    ranks_to_advantages,
    team_rewards,
    turn_rewards,
)

RAW = dict(format_reward=0.0, draw_reward=0.0)  # shaping off: rewards are the env's


def match(turns, seed=0, game="g", mid="m", bots=()):
    """turns: (player, reward, n_tokens[, valid]); returns = per-player reward sums."""
    recs = []
    for i, t in enumerate(turns):
        player, reward, n = t[:3]
        valid = t[3] if len(t) > 3 else True
        bot = player in bots
        recs.append(
            TurnRecord(
                index=i,
                player=player,
                agent="bot" if bot else "llm",
                move="x",
                action=0,
                valid=valid,
                token_ids=[] if bot else [7] * n,
                reward=reward,
            )
        )
    players = sorted({t[0] for t in turns})
    returns = {p: sum(t[1] for t in turns if t[0] == p) for p in players}
    return MatchRecord(
        match_id=mid,
        game=game,
        params={},
        seed=seed,
        seats={p: "llm" for p in players},
        turns=recs,
        returns=returns,
        outcome=outcomes(returns),
    )


def adv(samples):
    return {(s.match_index, s.turn_index): s.advantage for s in samples}


def test_shaped_turn_rewards():
    cfg = AdvantageConfig(length_max=10, length_min=2, length_penalty_coef=0.5)
    m = match([("p0", 0.0, 14), ("p1", 0.0, 1, False), ("p0", 0.0, 1), ("p1", 0.0, 1)])  # a draw
    # p0: 0.05 format - 0.5*(14-10)/(10-2) = 0.05 - 0.25 = -0.2; p1's first is invalid: 0;
    # last turns of a draw get +0.1: p0 0.05+0.1, p1 0.05+0.1
    assert turn_rewards(m, cfg) == pytest.approx([-0.2, 0.0, 0.15, 0.15])


def test_mars_full_recipe():
    # match 0: p0 wins. match 1: a draw. Token counts in brackets.
    m0 = match([("p0", 0.0, 2), ("p1", -1.0, 1), ("p0", 1.0, 1)])
    m1 = match([("p0", 0.0, 1), ("p1", 0.0, 2), ("p0", 0.0, 1)])
    out = adv(compute_advantages([m0, m1], AdvantageConfig(estimator="mars")))
    # shaped r: m0 [0.05, -0.95, 1.05]; m1 [0.05, 0.15 (draw), 0.15 (draw)]
    # per-(game, player) centring: p0 mean (0.05+1.05+0.05+0.15)/4 = 0.325; p1 mean -0.4
    #   m0 [-0.275, -0.55, 0.725]; m1 [-0.275, 0.55, -0.175]
    # whiten over 8 response tokens (rewards on last tokens, sum 0 -> mean 0):
    #   sum sq = 0.275^2 + 0.55^2 + 0.725^2 + 0.275^2 + 0.55^2 + 0.175^2 = 1.3125; var = 1.3125/7
    s = math.sqrt(1.3125 / 7 + 1e-8)
    # return-to-go (per player, gamma 1), in units of 1/s:
    #   m0: p0 k0 0.45, k2 0.725; p1 k1 -0.55.   m1: p0 k0 -0.45, k2 -0.175; p1 k1 0.55
    # agent norm: p0 distinct values mean 0.55/4 = 0.1375 -> 0.3125, 0.5875, -0.5875, -0.3125
    #             p1 mean 0 -> -0.55, 0.55
    vals = {
        (0, 0): 0.3125,
        (0, 1): -0.55,
        (0, 2): 0.5875,
        (1, 0): -0.5875,
        (1, 1): 0.55,
        (1, 2): -0.3125,
    }
    n = {(0, 0): 2, (0, 1): 1, (0, 2): 1, (1, 0): 1, (1, 1): 2, (1, 2): 1}
    # final whitening over tokens (a turn of n tokens counts n times): mean 0.8625/8 units
    mean = 0.8625 / 8
    ss = sum(n[k] * (vals[k] - mean) ** 2 for k in vals) / s**2
    std = math.sqrt(ss / 7 + 1e-8)
    expected = {k: (v - mean) / s / std for k, v in vals.items()}
    assert out.keys() == expected.keys()
    for k in expected:
        assert out[k] == pytest.approx(expected[k], rel=1e-9)


def test_mars_agent_norm_uses_distinct_values():
    cfg = AdvantageConfig(
        estimator="mars",
        player_reward_norm=False,
        whiten_rewards=False,
        whiten_advantages=False,
        **RAW,
    )
    wins = [match([("p0", 0.0, 1), ("p0", 1.0, 1)]) for _ in range(2)]
    loss = match([("p0", 0.0, 1), ("p0", -1.0, 1)])
    # returns-to-go: wins 1, 1 (twice), loss -1, -1. Distinct {1, -1}: mean 0, so A = G.
    out = adv(compute_advantages(wins + [loss], cfg))
    assert out == {(0, 0): 1, (0, 1): 1, (1, 0): 1, (1, 1): 1, (2, 0): -1, (2, 1): -1}
    # over turns instead, the mean is (4 - 2)/6 = 1/3
    cfg.agent_norm_unique = False
    out = adv(compute_advantages(wins + [loss], cfg))
    assert out[(0, 0)] == pytest.approx(2 / 3) and out[(2, 1)] == pytest.approx(-4 / 3)


def test_mars_gamma_discounts_per_turn():
    cfg = AdvantageConfig(
        estimator="mars",
        gamma=0.5,
        player_reward_norm=False,
        whiten_rewards=False,
        agent_norm=False,
        whiten_advantages=False,
        **RAW,
    )
    # p0 rewards 1, 0, 4 -> G = 1 + 0.5*0 + 0.25*4 = 2, 0 + 0.5*4 = 2, 4; the bot p1 is not trained
    m = match(
        [("p0", 1.0, 1), ("p1", 9.0, 0), ("p0", 0.0, 1), ("p1", 9.0, 0), ("p0", 4.0, 1)],
        bots=("p1",),
    )
    assert adv(compute_advantages([m], cfg)) == {(0, 0): 2.0, (0, 2): 2.0, (0, 4): 4.0}


def test_grpo_and_median():
    # one group (same game and seed) of 3 matches, p0 learns, p1 is a bot; p0 returns 3, 0, 0
    group = [match([("p0", r, 1), ("p1", 0.0, 0)], seed=5, bots=("p1",)) for r in (3.0, 0.0, 0.0)]
    alone = match([("p0", 1.0, 1)], seed=6)
    cfg = AdvantageConfig(estimator="grpo", **RAW)
    # mean 1, unbiased std sqrt((4+1+1)/2) = sqrt(3): A = 2/sqrt3, -1/sqrt3, -1/sqrt3; a lone match 0
    sd = math.sqrt(3) + 1e-6
    assert adv(compute_advantages(group + [alone], cfg)) == pytest.approx(
        {(0, 0): 2 / sd, (1, 0): -1 / sd, (2, 0): -1 / sd, (3, 0): 0.0}
    )
    cfg.estimator = "grpo_median"  # median 0: A = 3/sqrt3, 0, 0
    assert adv(compute_advantages(group, cfg)) == pytest.approx(
        {(0, 0): 3 / sd, (1, 0): 0.0, (2, 0): 0.0}
    )
    cfg.group_std = False
    assert adv(compute_advantages(group, cfg)) == pytest.approx(
        {(0, 0): 3.0, (1, 0): 0.0, (2, 0): 0.0}
    )


def test_rae_is_stateful_and_drops_zero():
    cfg = AdvantageConfig(estimator="rae", **RAW)
    state = {}
    batch1 = [match([("p0", r, 1), ("p0", 0.0, 1)]) for r in (0.0, 1.0, 1.0)]
    # b starts 0. R=0: A=0 (dropped), b=0.  R=1: A=1, b=0.05.  R=1: A=0.95, b=0.95*0.05+0.05=0.0975
    out = adv(compute_advantages(batch1, cfg, state))
    assert out == pytest.approx({(1, 0): 1.0, (1, 1): 1.0, (2, 0): 0.95, (2, 1): 0.95})
    assert state["rae"]["g/p0"] == pytest.approx(0.0975)
    # next batch continues from the stored baseline: R=-1: A = -1 - 0.0975
    out = adv(compute_advantages([match([("p0", -1.0, 1)])], cfg, state))
    assert out == pytest.approx({(0, 0): -1.0975})
    assert state["rae"]["g/p0"] == pytest.approx(0.95 * 0.0975 - 0.05)
    cfg.drop_zero_advantage = False
    assert len(compute_advantages([match([("p0", 0.0, 1)], game="h")], cfg, {})) == 1


def test_leave_one_out():
    cfg = AdvantageConfig(estimator="loo", **RAW)
    ms = [
        match([("p0", 0.0, 1), ("p0", 1.0, 1)]),
        match([("p0", 1.0, 1), ("p0", -1.0, 1)]),
        match([("p0", 0.5, 1)]),
    ]
    # return-to-go: m0 [1, 1], m1 [0, -1], m2 [0.5] (0 after its end)
    # m0: 1 - (0+0.5)/2 = 0.75, 1 - (-1+0)/2 = 1.5;  m1: 0 - (1+0.5)/2 = -0.75, -1 - (1+0)/2 = -1.5
    # m2: 0.5 - (1+0)/2 = 0
    assert adv(compute_advantages(ms, cfg)) == pytest.approx(
        {(0, 0): 0.75, (0, 1): 1.5, (1, 0): -0.75, (1, 1): -1.5, (2, 0): 0.0}
    )


def test_advantage_alignment_raw_equation():
    cfg = AdvantageConfig(
        estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, aa_normalize=False, **RAW
    )
    # turn order p0 p1 p0 p1. m0 rewards p0 [1, 0], p1 [0, 2]; m1 p0 [0, 0], p1 [1, 0]
    m0 = match([("p0", 1.0, 1), ("p1", 0.0, 1), ("p0", 0.0, 1), ("p1", 2.0, 1)])
    m1 = match([("p0", 0.0, 1), ("p1", 1.0, 1), ("p0", 0.0, 1), ("p1", 0.0, 1)])
    # G: m0 p0 [1,0] p1 [2,2]; m1 p0 [0,0] p1 [1,0]. LOO (the other match is the baseline):
    # A1 m0 p0 [1,0] p1 [1,2]; m1 p0 [-1,0] p1 [-1,-2]
    # A*_t = g^t [A1_t + beta g (sum_{k<t} g^(t-k) A1_k) A2_t], beta g = 1:
    # m0 p0: t0 1; t1 0.5 [0 + (0.5*1)*2] = 0.5.   m0 p1: t0 1; t1 0.5 [2 + (0.5*1)*0] = 1
    # m1 p0: t0 -1; t1 0.5 [0 + (0.5*-1)*-2] = 0.5. m1 p1: t0 -1; t1 0.5 [-2 + (0.5*-1)*0] = -1
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {
            (0, 0): 1,
            (0, 2): 0.5,
            (0, 1): 1,
            (0, 3): 1,
            (1, 0): -1,
            (1, 2): 0.5,
            (1, 1): -1,
            (1, 3): -1,
        }
    )
    alone = match([("p0", 0.0, 1), ("p0", 0.0, 1)])
    with pytest.raises(ValueError, match="two or more players"):
        compute_advantages([alone], cfg)


def three_rounds():
    """Three rounds, turn order p0 p1 p0 p1 p0 p1. m0 rewards p0 [1, 0, 1], p1 [0, 1, 1]; m1 all 0."""
    m0 = match(
        [
            ("p0", 1.0, 1),
            ("p1", 0.0, 1),
            ("p0", 0.0, 1),
            ("p1", 1.0, 1),
            ("p0", 1.0, 1),
            ("p1", 1.0, 1),
        ]
    )
    return m0, match([(p, 0.0, 1) for p in ("p0", "p1") * 3])


def test_advantage_alignment_normalised_as_the_paper_code():
    cfg = AdvantageConfig(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, **RAW)
    m0, m1 = three_rounds()
    # G m0 p0 [2, 1, 1], p1 [2, 2, 1]; m1 0. LOO: A1 m0 p0 [2, 1, 1], p1 [2, 2, 1], m1 the negatives.
    # Whitened over all 12: mean 0, unbiased var 2 (4+1+1+4+4+1) / 11 = 30/11, so a1 = c A1, c = 1 / (sqrt(30/11) + eps).
    # A*_t = g^t [a1_t + beta g (1/t sum_{k<t} g^(t-k) a1_k) a2_t], beta g = 1:
    # m0 p0: t0 2c; t1 0.5 [c + (0.5 2c) 2c] = 0.5 (c + 2c^2); t2 0.25 [c + (0.5 c + 0.25 2c)/2 c] = 0.25 (c + c^2/2)
    # m0 p1: t0 2c; t1 0.5 [2c + (0.5 2c) c] = 0.5 (2c + c^2); t2 0.25 [c + (0.5 2c + 0.25 2c)/2 c] = 0.25 (c + 0.75 c^2)
    # m1 flips every a1: the products keep their sign, the own terms flip
    c = 1 / (math.sqrt(30 / 11) + cfg.eps)
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {
            (0, 0): 2 * c,
            (0, 2): 0.5 * (c + 2 * c**2),
            (0, 4): 0.25 * (c + c**2 / 2),
            (0, 1): 2 * c,
            (0, 3): 0.5 * (2 * c + c**2),
            (0, 5): 0.25 * (c + 0.75 * c**2),
            (1, 0): -2 * c,
            (1, 2): 0.5 * (-c + 2 * c**2),
            (1, 4): 0.25 * (-c + c**2 / 2),
            (1, 1): -2 * c,
            (1, 3): 0.5 * (-2 * c + c**2),
            (1, 5): 0.25 * (-c + 0.75 * c**2),
        }
    )
    # whitening makes it scale-free: payoffs x 10 give the same advantages
    scaled = AdvantageConfig(
        estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, reward_scale=10.0, **RAW
    )
    assert adv(compute_advantages([m0, m1], scaled)) == pytest.approx(
        adv(compute_advantages([m0, m1], cfg)), rel=1e-5
    )  # up to eps


def test_advantage_alignment_whitened_with_the_past_summed():
    """`aa_past_sum`: the whitened advantages of the test above, the past own advantages summed
    as in the paper's equation, not averaged over the t past decisions: only t >= 2 changes."""
    cfg = AdvantageConfig(
        estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, aa_past_sum=True, **RAW
    )
    moves = [("p0", 1.0), ("p1", 0.0), ("p0", 0.0), ("p1", 1.0), ("p0", 1.0), ("p1", 1.0)]
    m0 = match([(p, r, 1) for p, r in moves])
    m1 = match([(p, 0.0, 1) for p, _ in moves])
    # a1 as above (c = 1 / sqrt(30/11)): m0 p0 [2c, c, c], p1 [2c, 2c, c]; beta g = 1.
    # t2, past summed: p0 0.25 [c + (0.5 c + 0.25 2c) c] = 0.25 (c + c^2);
    #                  p1 0.25 [c + (0.5 2c + 0.25 2c) c] = 0.25 (c + 1.5 c^2)
    c = 1 / (math.sqrt(30 / 11) + cfg.eps)
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {
            (0, 0): 2 * c,
            (0, 2): 0.5 * (c + 2 * c**2),
            (0, 4): 0.25 * (c + c**2),
            (0, 1): 2 * c,
            (0, 3): 0.5 * (2 * c + c**2),
            (0, 5): 0.25 * (c + 1.5 * c**2),
            (1, 0): -2 * c,
            (1, 2): 0.5 * (-c + 2 * c**2),
            (1, 4): 0.25 * (-c + c**2),
            (1, 1): -2 * c,
            (1, 3): 0.5 * (-2 * c + c**2),
            (1, 5): 0.25 * (-c + 1.5 * c**2),
        }
    )


def test_advantage_alignment_causal_past_counts_only_the_rewards_before_t():
    """`aa_past: causal` on the raw equation: decision k's past advantage at t is its rewards
    k .. t-1 minus the other match's, so nothing in the shaping term at t depends on the
    action at t (the return-to-go form would count rewards t and after)."""
    cfg = AdvantageConfig(
        estimator="advantage_alignment",
        aa_beta=2.0,
        aa_gamma=0.5,
        aa_normalize=False,
        aa_past="causal",
        **RAW,
    )
    m0, m1 = three_rounds()
    # A1 (return-to-go, loo): m0 p0 [2, 1, 1], p1 [2, 2, 1]; m1 the negatives.
    # causal c(k, t): m0 p0 t1: c0 = 1; t2: c0 = 1 + 0, c1 = 0.  m0 p1 t1: c0 = 0; t2: c0 = 1, c1 = 1.
    # m1: the negatives. past_t = sum_k g^(t-k) c(k, t); A*_t = g^t [A1_t + beta g past_t a2_t], beta g = 1
    # m0 p0: 2; 0.5 (1 + 0.5 * 2) = 1;        0.25 (1 + (0.25 * 1 + 0.5 * 0) * 1) = 0.3125
    # m0 p1: 2; 0.5 (2 + 0 * 1) = 1;           0.25 (1 + (0.25 * 1 + 0.5 * 1) * 1) = 0.4375
    # m1 p0: -2; 0.5 (-1 + -0.5 * -2) = 0;     0.25 (-1 + (-0.25) * -1) = -0.1875
    # m1 p1: -2; 0.5 (-2 + 0) = -1;            0.25 (-1 + (-0.75) * -1) = -0.0625
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {
            (0, 0): 2,
            (0, 2): 1,
            (0, 4): 0.3125,
            (0, 1): 2,
            (0, 3): 1,
            (0, 5): 0.4375,
            (1, 0): -2,
            (1, 2): 0,
            (1, 4): -0.1875,
            (1, 1): -2,
            (1, 3): -1,
            (1, 5): -0.0625,
        }
    )
    with pytest.raises(ValueError, match="aa_past must be one of return, causal"):
        AdvantageConfig(aa_past="critic")


def test_advantage_alignment_sums_the_past_from_batch_aa_past_sum_from():
    """`aa_past_sum_from: 2`: the first two batches scored through one state dict average the
    past (as without `aa_past_sum`), the third sums it (as `aa_past_sum` from the start); the
    count lives in the state, so a fresh dict starts again at the averaged form."""
    base = dict(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, **RAW)
    moves = [("p0", 1.0), ("p1", 0.0), ("p0", 0.0), ("p1", 1.0), ("p0", 1.0), ("p1", 1.0)]
    batch = [match([(p, r, 1) for p, r in moves]), match([(p, 0.0, 1) for p, _ in moves])]
    averaged = adv(compute_advantages(batch, AdvantageConfig(**base)))
    summed = adv(compute_advantages(batch, AdvantageConfig(aa_past_sum=True, **base)))
    assert averaged[(0, 4)] != pytest.approx(summed[(0, 4)])  # t = 2: the forms differ
    cfg = AdvantageConfig(aa_past_sum=True, aa_past_sum_from=2, **base)
    state: dict = {}
    got = [adv(compute_advantages(batch, cfg, state)) for _ in range(3)]
    assert got[0] == averaged and got[1] == averaged and got[2] == summed
    assert state["aa_batches"] == 3
    assert adv(compute_advantages(batch, cfg, {})) == averaged
    with pytest.raises(ValueError, match="aa_past_sum_from must be >= 0"):
        AdvantageConfig(aa_past_sum_from=-1)


def test_advevo_public_baseline():
    cfg = AdvantageConfig(
        estimator="advevo", functional_groups={"p0": "team", "p1": "team", "p2": "attacker"}, **RAW
    )
    m0 = match([("p0", 1.0, 1), ("p1", 3.0, 1), ("p2", -2.0, 1)])
    m1 = match([("p0", 2.0, 1), ("p1", 2.0, 1), ("p2", 0.0, 1)])
    # team baseline mean(1, 3, 2, 2) = 2; attacker baseline mean(-2, 0) = -1
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {(0, 0): -1, (0, 1): 1, (0, 2): -1, (1, 0): 0, (1, 1): 0, (1, 2): 1}
    )


def test_arena_ranks():
    cfg = AdvantageConfig(estimator="arena_ranks", **RAW)
    ms = [match([("p0", r, 1)], seed=1) for r in (3.0, 1.0, 2.0, 1.0)]
    # ranks from returns (ties share the best rank): 0, 2, 1, 2 -> r = 1 - rank/3 = 1, 1/3, 2/3, 1/3
    # mean 7/12; deviations 5/12, -3/12, 1/12, -3/12; unbiased var (25+9+1+9)/144/3 = 11/108
    sd = math.sqrt(11 / 108) + 1e-6
    assert adv(compute_advantages(ms, cfg)) == pytest.approx(
        {(0, 0): 5 / 12 / sd, (1, 0): -3 / 12 / sd, (2, 0): 1 / 12 / sd, (3, 0): -3 / 12 / sd}
    )
    # ranks given (e.g. by a judge): 3, 0, 1, 2 -> r = 0, 1, 2/3, 1/3; mean 1/2; var (1/4+1/4+1/36+1/36)/3 = 5/27
    sd = math.sqrt(5 / 27) + 1e-6
    ranks = [{"p0": 3}, {"p0": 0}, {"p0": 1}, {"p0": 2}]
    assert adv(compute_advantages(ms, cfg, ranks=ranks)) == pytest.approx(
        {(0, 0): -0.5 / sd, (1, 0): 0.5 / sd, (2, 0): (1 / 6) / sd, (3, 0): (-1 / 6) / sd}
    )
    with pytest.raises(ValueError, match="4 matches"):
        compute_advantages(ms, cfg, ranks=ranks[:2])


def test_every_estimator_returns_samples_with_turns():
    ms = [match([("p0", 1.0, 2), ("p1", -1.0, 3)], mid=f"m{i}") for i in range(2)]
    ms.append(match([("p0", -1.0, 2), ("p1", 1.0, 3)], mid="m2"))
    values = {(m, k): 0.1 * k for m in range(3) for k in range(2)}
    for name in ESTIMATORS:
        extra = {"values": values} if name == "critic" else {}
        samples = compute_advantages(
            ms, AdvantageConfig(estimator=name, drop_zero_advantage=False), **extra
        )
        assert len(samples) == 6, name
        for s in samples:
            assert s.turn is ms[s.match_index].turns[s.turn_index]
            assert math.isfinite(s.advantage)


def test_critic_gae_over_each_players_turns():
    m = match([("p0", 0.0, 1), ("p1", 0.0, 1), ("p0", 1.0, 1), ("p1", -1.0, 1)])
    V = {(0, 0): 0.2, (0, 1): -0.1, (0, 2): 0.6, (0, 3): -0.5}
    cfg = AdvantageConfig(
        estimator="critic", gamma=0.9, gae_lambda=0.5, whiten_advantages=False, **RAW
    )
    out = {
        (s.match_index, s.turn_index): (s.advantage, s.value_target)
        for s in compute_advantages([m], cfg, values=V)
    }
    # p0 k2 (last): delta = 1 - 0.6 = 0.4 = A, target 1.0
    # p0 k0: delta = 0 + 0.9 * 0.6 - 0.2 = 0.34; A = 0.34 + 0.9 * 0.5 * 0.4 = 0.52, target 0.72
    # p1 k3: delta = -1 + 0.5 = -0.5 = A, target -1.0
    # p1 k1: delta = 0.9 * -0.5 + 0.1 = -0.35; A = -0.35 + 0.45 * -0.5 = -0.575, target -0.675
    expected = {
        (0, 0): (0.52, 0.72),
        (0, 1): (-0.575, -0.675),
        (0, 2): (0.4, 1.0),
        (0, 3): (-0.5, -1.0),
    }
    assert out.keys() == expected.keys()
    for k, (a, t) in expected.items():
        assert out[k] == pytest.approx((a, t)), k
    # lambda 1: the Monte-Carlo return minus V (p0 k0: 0.9 * 1 - 0.2)
    cfg.gae_lambda = 1.0
    mc = adv(compute_advantages([m], cfg, values=V))
    assert mc[(0, 0)] == pytest.approx(0.7) and mc[(0, 1)] == pytest.approx(-0.9 + 0.1)
    cfg.whiten_advantages = True
    white = adv(compute_advantages([m], cfg, values=V))
    assert sum(white.values()) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="needs the value head"):
        compute_advantages([m], cfg)
    with pytest.raises(ValueError, match="gae_lambda must be in"):
        AdvantageConfig(gae_lambda=1.5)


def test_aborted_matches_are_skipped_and_bad_names_rejected():
    ok, bad = match([("p0", 1.0, 1)]), match([("p0", 1.0, 1)])
    bad.error = "backend died"
    samples = compute_advantages([bad, ok], AdvantageConfig(estimator="grpo"))
    assert [s.match_index for s in samples] == [1]
    with pytest.raises(ValueError, match="estimator must be one of mars, .*, got 'ppo'"):
        AdvantageConfig(estimator="ppo")


def test_mars_norm_by_opponent_centres_per_opponent():
    # p0 plays two matches against a random bot (a win, a draw) and two in self-play (a loss, a draw)
    vs_bot = [
        match([("p0", 1.0, 1), ("p1", -1.0, 1)], bots=("p1",)),
        match([("p0", 0.0, 1), ("p1", 0.0, 1)], bots=("p1",)),
    ]
    for m in vs_bot:
        m.seats["p1"] = "random"
    selfplay = [match([("p0", -1.0, 1), ("p1", 1.0, 1)]), match([("p0", 0.0, 1), ("p1", 0.0, 1)])]
    only_centring = dict(
        RAW, estimator="mars", whiten_rewards=False, agent_norm=False, whiten_advantages=False
    )
    plain = adv(compute_advantages(vs_bot + selfplay, AdvantageConfig(**only_centring)))
    per_opponent = adv(
        compute_advantages(
            vs_bot + selfplay, AdvantageConfig(**only_centring, norm_by_opponent=True)
        )
    )
    # p0's mean over all four is 0: the bot matches look good and the self-play loss bad
    assert [plain[(m, 0)] for m in range(4)] == pytest.approx([1.0, 0.0, -1.0, 0.0])
    # per opponent: vs random mean 0.5, in self-play mean -0.5; the draws sit on opposite sides
    assert [per_opponent[(m, 0)] for m in range(4)] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # p1 learns only in self-play (the bot's turns have no tokens): mean 0.5
    assert [per_opponent[(m, 1)] for m in (2, 3)] == pytest.approx([0.5, -0.5])


def test_gigpo_adds_a_step_advantage_over_turns_from_the_same_prompt():
    plain = dict(
        player_reward_norm=False,
        whiten_rewards=False,
        agent_norm=False,
        whiten_advantages=False,
        **RAW,
    )
    # three matches, p0 moves twice: prompts A then B / A then C / A then B
    ms = [
        match([("p0", 0.0, 1), ("p0", r, 1)], mid=f"m{i}") for i, r in enumerate([1.0, -1.0, -1.0])
    ]
    for m, second in zip(ms, "BCB"):
        m.turns[0].messages = [{"role": "user", "content": "A"}]
        m.turns[1].messages = [{"role": "user", "content": second}]
    # with every normalisation off the mars part is the return-to-go: [1, 1], [-1, -1], [-1, -1]
    # anchor A: G = 1, -1, -1: mean -1/3, unbiased std sqrt(4/3) -> 2/sqrt(3), -1/sqrt(3), -1/sqrt(3)
    # anchor B (matches 0 and 2): G = 1, -1 -> 1/sqrt(2), -1/sqrt(2); anchor C alone: 0
    out = adv(compute_advantages(ms, AdvantageConfig(estimator="gigpo", gigpo_weight=0.5, **plain)))
    r3, r2 = math.sqrt(3), math.sqrt(2)
    expected = {
        (0, 0): 1 + 0.5 * 2 / r3,
        (0, 1): 1 + 0.5 / r2,
        (1, 0): -1 - 0.5 / r3,
        (1, 1): -1.0,
        (2, 0): -1 - 0.5 / r3,
        (2, 1): -1 - 0.5 / r2,
    }
    assert out.keys() == expected.keys()
    for k, v in expected.items():
        assert out[k] == pytest.approx(v, rel=1e-6)
    # only centred (group_std off): anchor A -> 4/3, -2/3, -2/3
    out = adv(
        compute_advantages(
            ms, AdvantageConfig(estimator="gigpo", gigpo_weight=1.0, group_std=False, **plain)
        )
    )
    assert out[(0, 0)] == pytest.approx(1 + 4 / 3) and out[(1, 0)] == pytest.approx(-1 - 2 / 3)
    # weight 0 is mars exactly
    zero = adv(
        compute_advantages(ms, AdvantageConfig(estimator="gigpo", gigpo_weight=0.0, **plain))
    )
    assert zero == adv(compute_advantages(ms, AdvantageConfig(estimator="mars", **plain)))


def test_gigpo_anchor_groups_split_by_opponent_when_asked():
    plain = dict(
        player_reward_norm=False,
        whiten_rewards=False,
        agent_norm=False,
        whiten_advantages=False,
        **RAW,
    )
    ms = [
        match([("p0", r, 1), ("p1", 0.0, 1)], mid=f"m{i}", bots=("p1",))
        for i, r in enumerate([1.0, -1.0])
    ]
    for m, opp in zip(ms, ["random", "mcts"]):
        m.seats["p1"] = opp
        m.turns[0].messages = [{"role": "user", "content": "A"}]
    together = adv(compute_advantages(ms, AdvantageConfig(estimator="gigpo", **plain)))
    assert together == {
        (0, 0): pytest.approx(1 + 1 / math.sqrt(2)),
        (1, 0): pytest.approx(-1 - 1 / math.sqrt(2)),
    }
    apart = adv(
        compute_advantages(ms, AdvantageConfig(estimator="gigpo", norm_by_opponent=True, **plain))
    )
    assert apart == {(0, 0): 1.0, (1, 0): -1.0}  # each prompt met once per opponent: no step term


def test_mars_agent_specific_norm_off_shares_one_baseline_across_players():
    # self-play in game g: p0 (moving first) wins both matches; in game h p0 gets 3, p1 1
    batch = [
        match([("p0", 1.0, 1), ("p1", -1.0, 1)], mid="a"),
        match([("p0", 1.0, 1), ("p1", -1.0, 1)], mid="b"),
        match([("p0", 3.0, 1), ("p1", 1.0, 1)], game="h", mid="c"),
    ]
    only_centring = dict(RAW, estimator="mars", whiten_rewards=False, whiten_advantages=False)
    specific = adv(compute_advantages(batch, AdvantageConfig(**only_centring)))
    shared = adv(
        compute_advantages(batch, AdvantageConfig(**only_centring, agent_specific_norm=False))
    )
    # per (game, player) every reward equals its mean: the first-mover edge is baselined away
    assert specific == {k: 0.0 for k in specific}
    # one mean per game over both seats: g mean 0, h mean 2 -> p0 +1, p1 -1 in every match;
    # then one return-to-go baseline over all turns: distinct values {1, -1}, mean 0
    assert shared == {
        (0, 0): 1.0,
        (0, 1): -1.0,
        (1, 0): 1.0,
        (1, 1): -1.0,
        (2, 0): 1.0,
        (2, 1): -1.0,
    }
    # the return-to-go baseline alone: per player p0 {2} and p1 {0} centre to 0; shared: mean of {2, 0} = 1
    one = [match([("p0", 2.0, 1), ("p1", 0.0, 1)])]
    agent_only = dict(only_centring, player_reward_norm=False)
    assert adv(compute_advantages(one, AdvantageConfig(**agent_only))) == {(0, 0): 0.0, (0, 1): 0.0}
    assert adv(
        compute_advantages(one, AdvantageConfig(**agent_only, agent_specific_norm=False))
    ) == {(0, 0): 1.0, (0, 1): -1.0}


def test_ranks_to_advantages_hand_computed():
    # ranks 0,1,2 -> r = 1, 0.5, 0 -> mean 0.5, unbiased std 0.5 -> 1, 0, -1
    np.testing.assert_allclose(ranks_to_advantages([0, 1, 2]), [1.0, 0.0, -1.0], atol=1e-5)
    # N = 4, ranks 2,0,3,1 -> r = 1/3, 1, 0, 2/3; std(ddof=1) = 0.4303
    r = np.array([1 / 3, 1, 0, 2 / 3])
    np.testing.assert_allclose(
        ranks_to_advantages([2, 0, 3, 1]), (r - 0.5) / (r.std(ddof=1) + 1e-6)
    )
    assert ranks_to_advantages([0]).tolist() == [0.0]
    assert ranks_to_advantages([1, 1]).tolist() == [0.0, 0.0]


def three_players(rewards_m0, rounds):
    """m0: turn order p0 p1 p2 for `rounds` rounds with `rewards_m0[player][t]`; m1 (same group) all 0."""
    order = [(p, t) for t in range(rounds) for p in ("p0", "p1", "p2")]
    m0 = match([(p, rewards_m0[p][t], 1) for p, t in order])
    m1 = match([(p, 0.0, 1) for p, _ in order])
    return m0, m1


def test_advantage_alignment_three_players_sums_the_others_advantages():
    """Raw equation, three players, two rounds: the shaping term at t multiplies the past own
    advantages by the sum of the other two players' advantages at t (`aa_others: mean`: their mean)."""
    m0, m1 = three_players({"p0": [1.0, 0.0], "p1": [0.0, 1.0], "p2": [2.0, 0.0]}, rounds=2)
    base = dict(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, aa_normalize=False)
    # G (gamma 1): m0 p0 [1, 0], p1 [1, 1], p2 [2, 0]; m1 0. LOO: A1 m0 = G, m1 = -G.
    # A*_1 = 0.5 [A1_1 + (beta g = 1) (0.5 A1_0) S_1], S_1 = the others' A1_1:
    # m0 p0: S = 1 + 0; 0.5 [0 + 0.5 * 1] = 0.25.   p1: S = 0 + 0; 0.5 [1 + 0] = 0.5
    # m0 p2: S = 0 + 1; 0.5 [0 + 1 * 1] = 0.5.       m1: own terms flip, products keep their sign
    summed = {
        (0, 0): 1, (0, 1): 1, (0, 2): 2, (0, 3): 0.25, (0, 4): 0.5, (0, 5): 0.5,
        (1, 0): -1, (1, 1): -1, (1, 2): -2, (1, 3): 0.25, (1, 4): -0.5, (1, 5): 0.5,
    }  # fmt: skip
    assert adv(compute_advantages([m0, m1], AdvantageConfig(**base, **RAW))) == pytest.approx(
        summed
    )
    # the mean of the two others halves S: p0 0.5 [0.5 * 0.5] = 0.125, p2 0.5 [1 * 0.5] = 0.25
    mean = {**summed, (0, 3): 0.125, (0, 5): 0.25, (1, 3): 0.125, (1, 5): 0.25}
    cfg = AdvantageConfig(**base, aa_others="mean", **RAW)
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(mean)
    # a league opponent in seat p2: its turns are not learned, its advantage still shapes the others'
    m0.seats["p2"] = m1.seats["p2"] = "bot"
    for m in (m0, m1):
        for t in m.turns:
            if t.player == "p2":
                t.agent = "bot"
    cfg = AdvantageConfig(**base, learners=["llm"], **RAW)
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {k: v for k, v in summed.items() if k[1] % 3 != 2}
    )


def test_advantage_alignment_three_players_normalised():
    """Whitened advantages, past own advantages averaged over t, three players over three rounds."""
    m0, m1 = three_players(
        {"p0": [1.0, 0.0, 1.0], "p1": [0.0, 1.0, 0.0], "p2": [0.0, 0.0, 2.0]}, rounds=3
    )
    cfg = AdvantageConfig(estimator="advantage_alignment", aa_beta=2.0, aa_gamma=0.5, **RAW)
    # G: m0 p0 [2, 1, 1], p1 [1, 1, 0], p2 [2, 2, 2]; LOO: A1 m0 = G, m1 = -G.
    # Whitened over all 18: mean 0, unbiased var 2 (6 + 2 + 12) / 17 = 40/17; a1 = c A1.
    c = 1 / (math.sqrt(40 / 17) + cfg.eps)
    # a1 m0 p0 [2c, c, c], p1 [c, c, 0], p2 [2c, 2c, 2c]; beta g = 1; S_t = the others' a1_t.
    # t1: 0.5 [a1_1 + (0.5 a1_0) S_1]; t2: 0.25 [a1_2 + (0.25 a1_0 + 0.5 a1_1) / 2 S_2]
    # p0: S_1 = 3c, past c    -> 0.5 (c + 3c^2);   S_2 = 2c, past 0.5c   -> 0.25 (c + c^2)
    # p1: S_1 = 3c, past 0.5c -> 0.5 (c + 1.5c^2); S_2 = 3c, past 0.375c -> 0.25 (1.125 c^2)
    # p2: S_1 = 2c, past c    -> 0.5 (2c + 2c^2);  S_2 = c, past 0.75c   -> 0.25 (2c + 0.75 c^2)
    expected = {}
    for m, s in ((0, 1), (1, -1)):  # m1: the own terms flip, the products keep their sign
        expected.update(
            {
                (m, 0): s * 2 * c, (m, 3): 0.5 * (s * c + 3 * c**2), (m, 6): 0.25 * (s * c + c**2),
                (m, 1): s * c, (m, 4): 0.5 * (s * c + 1.5 * c**2), (m, 7): 0.25 * 1.125 * c**2,
                (m, 2): s * 2 * c, (m, 5): 0.5 * (s * 2 * c + 2 * c**2),
                (m, 8): 0.25 * (s * 2 * c + 0.75 * c**2),
            }
        )  # fmt: skip
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(expected)


def test_team_rewards_share_the_teams_mean_by_decision():
    # four seats, two rounds (simultaneous: p0 p1 p2 p3 each round); teams {p0, p2} and {p1, p3}
    rewards = {"p0": [1.0, 2.0], "p1": [4.0, 0.0], "p2": [3.0, 6.0], "p3": [0.0, 2.0]}
    m = match([(p, rewards[p][t], 1) for t in range(2) for p in ("p0", "p1", "p2", "p3")])
    teams = {"p0": "a", "p2": "a", "p1": "b", "p3": "b"}
    # round 0: a (1 + 3) / 2 = 2, b (4 + 0) / 2 = 2; round 1: a (2 + 6) / 2 = 4, b (0 + 2) / 2 = 1
    assert team_rewards(m, teams) == [2.0, 2.0, 2.0, 2.0, 4.0, 1.0, 4.0, 1.0]
    cfg = AdvantageConfig(teams=teams, reward_scale=0.5, **RAW)
    assert turn_rewards(m, cfg) == [1.0, 1.0, 1.0, 1.0, 2.0, 0.5, 2.0, 0.5]
    # a seat without a team keeps its own rewards
    assert team_rewards(m, {"p0": "a", "p2": "a"}) == [2.0, 4.0, 2.0, 0.0, 4.0, 0.0, 4.0, 2.0]
    # sequential, the members acting unequally often: p0 turns [1, 3], p1 one turn [5].
    # p0's first turn: (1 + 5) / 2; on a last turn, the rest of each member's rewards:
    # p0's second (3 + 0) / 2, p1's only (1 + 3 + 5) / 2; both sum to the team's mean return 4.5
    seq = match([("p0", 1.0, 1), ("p1", 5.0, 1), ("p0", 3.0, 1), ("p2", 7.0, 1)])
    assert team_rewards(seq, {"p0": "a", "p1": "a"}) == [3.0, 4.5, 1.5, 7.0]


def test_mars_normalises_per_seat_with_three_players():
    """Steps 1 and 4 of `mars` with three seats, whitening off: each seat's own baselines."""
    cfg = AdvantageConfig(estimator="mars", whiten_rewards=False, whiten_advantages=False, **RAW)
    m0 = match([("p0", 1.0, 1), ("p1", 0.0, 1), ("p2", -1.0, 1), ("p0", 2.0, 1)])
    m1 = match([("p0", 6.0, 1), ("p1", 2.0, 1), ("p2", -5.0, 1)])
    # step 1, per seat: p0 turns [1, 2, 6] - 3 = [-2, -1, 3]; p1 [0, 2] - 1; p2 [-1, -5] + 3
    # G: m0 p0 [-3, -1], m1 p0 [3]; p1 [-1], [1]; p2 [2], [-2]
    # step 4, per seat, minus the mean of the distinct G: p0 -1/3; p1 0; p2 0
    assert adv(compute_advantages([m0, m1], cfg)) == pytest.approx(
        {
            (0, 0): -8 / 3, (0, 3): -2 / 3, (1, 0): 10 / 3,
            (0, 1): -1, (1, 1): 1, (0, 2): 2, (1, 2): -2,
        }
    )  # fmt: skip
