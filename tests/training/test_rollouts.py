"""A step's matches (`training.rollouts.plan_step`): seat orders in pairs, the self-play share, branch groups on one deal."""

import numpy as np

from tests.tiny_run import TINY
from training.league import League
from training.sections import Matches
from training.selfplay import POLICY, parse_config, plan_step


def test_plan_step_pairs_seat_orders_and_splits_self_play():
    cfg = parse_config(
        {**TINY, "matches_per_step": 40, "league": {"self_play": 0.25, "bots": ["random"]}}
    )
    lg = League()
    lg.add("random", "bot", "random")
    planned = plan_step(Matches.of(cfg), cfg.league, lg, np.random.default_rng(0), step=7)
    assert len(planned) == 40
    opps = [o for _, o in planned]
    assert opps.count(None) == 10 and opps.count("random") == 30  # 5 of 20 pairs self-play
    for (a, oa), (b, ob) in zip(planned[::2], planned[1::2]):
        assert oa == ob and a.seed == b.seed  # a pair: same opponent, same deal
        if oa is None:
            assert a.seats == b.seats == [POLICY, POLICY]
        else:
            assert a.seats == [POLICY, "random"] and b.seats == ["random", POLICY]
    assert len({p.match_id for p, _ in planned}) == 40
    assert all(p.opening == 0 for p, _ in planned)
    cfg.games[0].opening = 2
    planned = plan_step(Matches.of(cfg), cfg.league, lg, np.random.default_rng(0), step=7)
    assert {(o, p.opening) for p, o in planned} == {
        (None, 2),
        ("random", 0),
    }  # self-play pairs only


def test_plan_step_branch_groups_pairs_on_one_deal():
    cfg = parse_config(
        {
            **TINY,
            "matches_per_step": 40,
            "league": {"self_play": 0.3, "bots": ["random", "minimax:1"]},
        }
    )
    lg = League()
    for b in ("random", "minimax:1"):
        lg.add(b, "bot", b)
    plain = plan_step(Matches.of(cfg), cfg.league, lg, np.random.default_rng(0), step=3)
    cfg.games[0].branch = 4
    planned = plan_step(Matches.of(cfg), cfg.league, lg, np.random.default_rng(0), step=3)
    assert [p.match_id for p, _ in planned] == [p.match_id for p, _ in plain]
    pairs = [
        planned[i : i + 2] for i in range(0, 40, 2)
    ]  # 20 pairs: 6 self-play (groups 4 + 2), 14 league (4 + 4 + 4 + 2)
    groups = [pairs[0:4], pairs[4:6], pairs[6:10], pairs[10:14], pairs[14:18], pairs[18:20]]
    for g in groups:
        assert (
            len({(p.seed, opp) for pair in g for p, opp in pair}) == 1
        )  # one deal, one opponent per group
    assert len({g[0][0][0].seed for g in groups}) == len(groups)
    assert [opp for _, opp in planned[:12]] == [None] * 12 and None not in [
        opp for _, opp in planned[12:]
    ]
    assert (
        planned[0][0].seed == plain[0][0].seed and planned[8][0].seed == plain[8][0].seed
    )  # group heads keep their deal
