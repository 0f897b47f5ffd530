"""The adaptive format: round structure, seats, budget, the stopping rule, ranking through
`rank_group`, and a tournament through `arena tournament` and the store that resumes
after an interruption to the same matches."""

import math
from collections import Counter

import numpy as np
import pytest
import yaml
from scipy.stats import kendalltau

from cli.main import main as arena_main
from tournaments.adaptive import adaptive, default_budget
from tournaments.formats import make_format, resolved_options
from tournaments.judge import rank_group, score_judge
from tournaments.rounds import PairResult, drive
from tournaments.run import load_tournament, run_tournament
from tournaments.sim import bt_play_matches, sim_config, strengths_of
from tournaments.store import jsonl_beside


def bt_rounds(strengths, seed):
    """play_round for simulated Bradley-Terry players (win/loss, P = sigmoid(s_a - s_b))."""
    rng = np.random.default_rng(seed)

    def play(pairings):
        out = []
        for p in pairings:
            pa = float(
                np.sum(rng.random(p.games) < 1 / (1 + np.exp(strengths[p.b] - strengths[p.a])))
            )
            out.append(PairResult(pa, p.games - pa, pa, p.games - pa, p.games))
        return out

    return play


@pytest.mark.parametrize("n,games", [(10, 1), (9, 1), (8, 2)])
def test_rounds_are_disjoint_full_and_seats_alternate(n, games):
    strengths = np.linspace(2.0, -2.0, n)
    outcome = drive(
        adaptive(list(range(n)), max_matches=12 * (n // 2) * games, games=games, seed=n),
        bt_rounds(strengths, n),
    )
    swiss_rounds = [r for r in outcome.rounds if r[0][0].label.startswith("S")]
    adaptive_rounds = [r for r in outcome.rounds if r[0][0].label.startswith("A")]
    assert len(swiss_rounds) == math.ceil(math.log2(n)) and len(adaptive_rounds) == 12 - len(
        swiss_rounds
    )  # then the rest of the budget
    for round_ in outcome.rounds:
        seated = [x for p, _ in round_ for x in (p.a, p.b)]
        assert len(seated) == len(set(seated)) == 2 * (n // 2)  # N/2 disjoint pairings, all at once
        assert len({p.label for p, _ in round_}) == 1 and all(p.games == games for p, _ in round_)
    swiss_pairs = [frozenset((p.a, p.b)) for r in swiss_rounds for p, _ in r]
    assert len(swiss_pairs) == len(set(swiss_pairs))  # no rematch in the Swiss phase
    first, second = Counter(), Counter()
    for p, _ in (pr for r in outcome.rounds for pr in r):
        first[p.a] += 1
        second[p.b] += 1
    assert all(abs(first[i] - second[i]) <= 2 for i in range(n)), (first, second)
    assert sum(abs(first[i] - second[i]) for i in range(n)) <= n  # mostly balanced to within one
    assert {s["stopped"] for s in outcome.stats.values()} == {"budget"}


@pytest.mark.parametrize("budget,games", [(50, 1), (37, 1), (41, 2)])
def test_budget_is_spent_and_never_exceeded(budget, games):
    n = 10
    outcome = drive(
        adaptive(list(range(n)), max_matches=budget, games=games),
        bt_rounds(np.linspace(1, -1, n), 0),
    )
    used = sum(p.games for r in outcome.rounds for p, _ in r)
    assert budget - games < used <= budget  # the last round is cut to what is left
    assert sum(s["games"] for s in outcome.stats.values()) == 2 * used


def test_default_budget_and_options():
    assert default_budget(64) == 768
    opts = resolved_options("adaptive", list(range(64)), {})
    assert opts["max_matches"] == 768 and opts["swiss_rounds"] == 6
    with pytest.raises(ValueError, match="max_matches must be an integer of at least one round"):
        next(make_format("adaptive", list(range(10)), max_matches=4))
    with pytest.raises(ValueError, match="unknown weights"):
        next(make_format("adaptive", list(range(4)), weights="entropy"))
    with pytest.raises(ValueError, match="width must be"):
        next(make_format("adaptive", list(range(4)), width=-1))


def test_stopping_rule_stops_when_ranks_are_settled():
    """Well-separated players: every rank interval narrows to `width` long before the budget."""
    n = 8
    strengths = np.linspace(7.0, -7.0, n)  # 2 logits apart
    budget = 2000
    outcome = drive(adaptive(list(range(n)), max_matches=budget, width=1), bt_rounds(strengths, 1))
    used = sum(p.games for r in outcome.rounds for p, _ in r)
    stats = outcome.stats
    assert {s["stopped"] for s in stats.values()} == {"settled"}
    assert used < budget / 4
    assert all(s["rank_hi"] - s["rank_lo"] <= 1 for s in stats.values())
    assert all(s["rank_lo"] <= outcome.ranks()[p] + 1 <= s["rank_hi"] for p, s in stats.items())
    # the same players without a stopping rule play the whole budget
    full = drive(adaptive(list(range(n)), max_matches=200), bt_rounds(strengths, 1))
    assert sum(p.games for r in full.rounds for p, _ in r) == 200


def test_rank_group_ranks_a_deterministic_order():
    """The higher score always wins: the ranking is exact for nearly every Swiss draw."""
    n = 16
    rng = np.random.default_rng(0)
    exact, taus = 0, []
    for seed in range(5):
        scores = rng.permutation(n).astype(float)
        ranks = rank_group(n, score_judge(scores), format="adaptive", max_matches=96, seed=seed)
        taus.append(kendalltau(-scores, ranks).statistic)
        exact += ranks == [int(r) for r in np.argsort(np.argsort(-scores))]
    assert exact >= 4 and min(taus) > 0.95, taus


def test_same_results_same_rounds():
    """Deterministic given the results: a replay yields the same rounds (what resume needs)."""
    strengths = np.random.default_rng(3).normal(0, 2, 12)
    runs = [
        drive(adaptive(list(range(12)), max_matches=90, seed=5), bt_rounds(strengths, 7))
        for _ in range(2)
    ]
    assert [[p for p, _ in r] for r in runs[0].rounds] == [
        [p for p, _ in r] for r in runs[1].rounds
    ]
    assert runs[0].order == runs[1].order


def test_store_resumes_an_interrupted_adaptive_tournament(tmp_path):
    config = sim_config(10, "adaptive", max_matches=40)
    strengths = strengths_of(list(config.players), spread=1.0)
    ref = run_tournament(
        config,
        bt_play_matches(strengths, str(tmp_path / "ref.jsonl")),
        tmp_path / "ref.db",
        tmp_path / "ref.jsonl",
    )
    db = tmp_path / "t.db"
    for limit in (
        7,
        6,
        12,
    ):  # interrupted three times (after 7, 13, 25 matches), in the Swiss and the adaptive phase
        played = []

        def interrupted(specs, limit=limit, played=played):
            for r in bt_play_matches(strengths, str(jsonl_beside(db)))(specs):
                if len(played) == limit:
                    raise KeyboardInterrupt
                played.append(r)
                yield r

        with pytest.raises(KeyboardInterrupt):
            run_tournament(config, interrupted, db)
    done = run_tournament(config, bt_play_matches(strengths, str(jsonl_beside(db))), db)
    assert done.played < len(ref.schedule)
    assert [s.match_id for s in done.schedule] == [s.match_id for s in ref.schedule]
    assert load_tournament(db).outcome.order == ref.outcome.order


def test_arena_tournament_with_the_adaptive_format(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = {
        "name": "adaptive bots",
        "format": "adaptive",
        "format_options": {"max_matches": 8},
        "players": {
            "mcts": "mcts:8",
            "random": "random",
            "random2": {"type": "random"},
            "weak": "mcts:2",
        },
        "games": ["tic_tac_toe"],
        "seed": 1,
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert arena_main(["tournament", str(path)]) == 0
    out = capsys.readouterr().out
    assert "8 match(es) played now" in out
    result = load_tournament(tmp_path / "runs" / "adaptive_bots" / "tournament.db")
    labels = [s.label for s in result.schedule]
    assert labels == ["S1", "S1", "S2", "S2", "A1", "A1", "A2", "A2"]
    assert (
        arena_main(["tournament", str(path)]) == 0
    )  # finished: a rerun replays the stored results
    assert "0 match(es) played now" in capsys.readouterr().out
