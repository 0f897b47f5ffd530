"""A step's matches (`training.rollouts.plan_step`): seat orders in pairs, the self-play share, branch groups on one deal,
the league opponent's seats in games of more players."""

import numpy as np
import pytest

from tests.tiny_run import TINY
from training.league import League
from training.rollouts import league_seats
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


def test_league_seats_rotate_the_opponent_through_every_seat():
    assert league_seats(2, 1, "bot", 0) == [POLICY, "bot"]
    assert league_seats(2, 1, "bot", 1) == ["bot", POLICY]
    four = [league_seats(4, 1, "bot", r) for r in range(4)]
    assert [s.index("bot") for s in four] == [3, 0, 1, 2]
    assert all(s.count(POLICY) == 3 for s in four)
    assert league_seats(3, 2, "bot", 1) == ["bot", POLICY, "bot"]
    with pytest.raises(ValueError, match="league.opponent_seats must be in"):
        league_seats(3, 3, "bot", 0)


def test_plan_step_fills_n_seats_with_the_policy_and_the_opponents_seats():
    cfg = parse_config(
        {
            **TINY,
            "games": ["public_goods"],
            "matches_per_step": 8,
            "eval": {"every": 0},
            "league": {"self_play": 0.5, "bots": ["random"], "opponent_seats": 2},
        }
    )
    lg = League()
    lg.add("random", "bot", "random")
    planned = plan_step(Matches.of(cfg), cfg.league, lg, np.random.default_rng(0), step=1)
    self_play = [p.seats for p, o in planned if o is None]
    league = [p.seats for p, o in planned if o is not None]
    assert self_play == [[POLICY] * 4] * 4
    # pairs 2 and 3: rotations 4..7 of [policy, policy, random, random]
    assert league == [
        [POLICY, POLICY, "random", "random"],
        ["random", POLICY, POLICY, "random"],
        ["random", "random", POLICY, POLICY],
        [POLICY, "random", "random", POLICY],
    ]


def test_opponent_seats_must_leave_the_policy_a_seat_in_every_game():
    over = {"league": {"self_play": 0.5, "bots": ["random"], "opponent_seats": 2}}
    with pytest.raises(ValueError, match=r"league.opponent_seats must be < .* tic_tac_toe has 2"):
        parse_config({**TINY, **over})
