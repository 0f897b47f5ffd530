"""`arena eval` and the evaluation module: hand-computed intervals, exploitability against
OpenSpiel's reference values and hand-made policies, the exact distribution of a
constrained tiny LLM, blunders, social metrics, paired matches, and kill -9 then resume."""

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import games
from agents import make_agent
from agents.base import PendingTurn, decision
from cli.main import main as arena_main
from core.records import MatchRecord, TurnRecord, read_jsonl
from evaluation.blunders import blunder_rows, expected_blunder_rate
from evaluation.exploitability import exploitability
from evaluation.metrics import MEASURES, cells, paired, summary
from evaluation.report import _num
from evaluation.run import evaluate, play_suite, run_eval
from evaluation.social import pareto_efficient, social_rows
from evaluation.stats import mean_ci, paired_bootstrap, ratio_ci, wilson
from evaluation.suites import EvalGame, make_config, plans
from tests.ctrl_c import default_sigint

ROOT = Path(__file__).resolve().parents[2]


# --- statistics -------------------------------------------------------------------------


def test_wilson_matches_the_hand_computed_interval():
    # 8 of 10, z = 1.96: centre (0.8 + z²/20) / (1 + z²/10) = 0.7167, half width 0.2266
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def _record(match_id: str, seats: dict, outcome: dict, returns: dict) -> MatchRecord:
    return MatchRecord(match_id, "kuhn_poker", {}, 0, seats, [], returns, outcome)


def test_ratio_ci_by_hand_and_equal_sizes_give_the_mean_ci():
    # 3 cooperative rounds of 4, 1 of 2, 6 of 6: rate 10/12; residuals c - rate n = -1/3, -2/3, +1;
    # se = sqrt((1/9 + 4/9 + 1) / (3 * 2)) / 4 = sqrt(14/54) / 4; t(0.975, 2) = 4.302653
    rate, lo, hi = ratio_ci([3, 1, 6], [4, 2, 6])
    half = 4.302653 * (14 / 54) ** 0.5 / 4
    assert rate == pytest.approx(10 / 12) and (lo, hi) == pytest.approx(
        (10 / 12 - half, 10 / 12 + half), rel=1e-6
    )
    assert ratio_ci([1, 3, 4], [4, 4, 4]) == pytest.approx(mean_ci([0.25, 0.75, 1.0]))
    assert ratio_ci([2], [3]) == pytest.approx((2 / 3,) * 3) and ratio_ci([], []) == (0.0, 0.0, 0.0)


def test_paired_difference_has_the_hand_computed_bootstrap_interval():
    """20 paired matches: the agent wins 10 that the baseline loses, both lose the other 10.
    The difference is 1 or 0 with p = 1/2, so the resampled mean is Binomial(20, 1/2)/20:
    P(X <= 5) = 0.021 < 0.025 <= P(X <= 6) = 0.058 and P(X <= 13) = 0.942 < 0.975 <= P(X <= 14)
    = 0.979, so the 95% interval is [6/20, 14/20] = [0.30, 0.70]."""
    records = []
    for k in range(20):
        seat = f"player_{k % 2}"
        other = f"player_{1 - k % 2}"
        for who, won in (("agent", k < 10), ("baseline", False)):
            mid = f"{who}|00.kuhn_poker|00.random|{k:05d}"
            outcome = {seat: "win" if won else "loss", other: "loss" if won else "win"}
            records.append(
                _record(
                    mid,
                    {seat: who, other: "random"},
                    outcome,
                    {seat: 1.0 if won else -1.0, other: -1.0 if won else 1.0},
                )
            )
    rows = paired(records)
    # stratified by seat, each seat holds 5 wins in 10 pairs: Bin(10, 1/2) + Bin(10, 1/2) = Bin(20, 1/2)
    for row in (
        rows[-1],
        [r for r in rows if r.seat == "all"][0],
    ):  # pooled over the game, and over the cell's seats
        assert (
            row.pairs == 20
            and row.points.diff == 0.5
            and (row.points.baseline, row.points.agent) == (0.0, 0.5)
        )
        assert row.points.ci == pytest.approx((0.30, 0.70)) and row.points.verdict == "better"
        assert (
            row.mean_return.diff == 1.0
            and row.mean_return.ci == pytest.approx((0.60, 1.40))
            and row.mean_return.verdict == "better"
        )
        assert (
            row.non_losing.ci == pytest.approx((0.30, 0.70)) and row.win_rate.diff == 0.5
        )  # no draws: as points
    assert paired_bootstrap([1.0] * 10 + [0.0] * 10).low == pytest.approx(0.30)
    same = paired_bootstrap([0.0] * 7)
    assert (same.low, same.high, same.verdict) == (0.0, 0.0, "no detectable difference")
    assert paired_bootstrap([-1.0] * 5 + [0.0]).verdict == "worse"


# --- exploitability ---------------------------------------------------------------------


def test_reference_policies_agree_with_openspiel():
    assert exploitability(make_agent("random"), "kuhn_poker").exploitability == pytest.approx(
        0.458333, abs=1e-6
    )
    leduc = exploitability(make_agent("random"), "leduc_poker")
    assert leduc.exploitability == pytest.approx(2.373611, abs=1e-6) and leduc.states == 936
    cfr = exploitability(make_agent("cfr"), "kuhn_poker")
    assert cfr.exploitability <= 0.01 and cfr.method == "exact"


class Always:
    """A hand-made Kuhn policy: always the same action (0 Pass, 1 Bet)."""

    def __init__(self, action: int, exact: bool = True):
        self.name, self.action = "always", action
        if exact:
            self.action_probabilities = lambda turns: [{self.action: 1.0} for _ in turns]

    def act(self, turns):
        return [decision(t, self.name, self.action) for t in turns]


def test_hand_made_policies_give_the_hand_computed_exploitability():
    # always Pass: the best response bets every hand and the other folds: +1 per seat over
    # the 0 of the showdown both would reach -> NashConv 2, exploitability 1.
    assert exploitability(Always(0), "kuhn_poker").exploitability == pytest.approx(1.0)
    # always Bet (calls every bet): player 0's best response bets K (+2), bets or passes Q
    # (0), passes and folds J (-1): 1/3 over the showdown's 0; player 1 calls K (+2) and Q
    # (0), folds J (-1): 1/3. NashConv 2/3, exploitability 1/3.
    r = exploitability(Always(1), "kuhn_poker")
    assert r.exploitability == pytest.approx(1 / 3) and r.nash_conv == pytest.approx(2 / 3)
    # the same policy through sampling (no action_probabilities): the same value
    sampled = exploitability(Always(1, exact=False), "kuhn_poker", samples=2)
    assert sampled.exploitability == pytest.approx(1 / 3) and sampled.method == "sampled (k=2)"


def _masked_softmax_by_hand(backend, messages, moves, temperature):
    """P(move) from plain forward passes: the product over the move's tokens and EOS of the
    softmax of logits / T over the trie's allowed next tokens."""
    from agents.constrained import allowed_token_ids

    tok = backend.tokenizer
    prompt = backend.encode(messages)
    out = []
    for move in moves:
        ids = tok(move, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        logp = 0.0
        for k, t in enumerate(ids):
            with torch.no_grad():
                logits = backend.model(torch.tensor([prompt + ids[:k]])).logits[0, -1].float()
            allowed = allowed_token_ids(tok, moves, ids[:k])
            logp += float(torch.log_softmax(logits[allowed] / temperature, 0)[allowed.index(t)])
        out.append(float(np.exp(logp)))
    return out


@pytest.mark.parametrize(
    "game, history", [("kuhn_poker", [2, 0, 1]), ("leduc_poker", [0, 3, 2, 1])]
)
def test_constrained_llm_distribution_is_the_softmax_of_its_masked_logits(game, history):
    agent = make_agent("llm:tiny-llama,constrained=true,temperature=0.8")
    env = games.make(game)
    env.reset(options={"history": history})
    turn = PendingTurn("m", env, env.agent_selection, np.random.default_rng(0))
    (dist,) = agent.action_probabilities([turn])
    expected = _masked_softmax_by_hand(
        agent.backend, agent.prompt_messages(turn), env.legal_moves(turn.player), 0.8
    )
    assert list(dist.values()) == pytest.approx(expected, abs=1e-5)
    assert sum(dist.values()) == pytest.approx(1.0) and list(dist) == env.legal_actions(turn.player)
    greedy = make_agent("llm:tiny-llama,constrained=true,temperature=0")
    (point,) = greedy.action_probabilities([turn])
    assert sorted(point.values()) == [0.0] * (len(point) - 1) + [1.0]
    assert max(point, key=point.get) == greedy.act([turn])[0].action  # the move it plays


@pytest.mark.parametrize("mode", ["fresh", "multi_turn"])
def test_exploitability_asks_through_the_prompt_seen_in_play(mode):
    """Every prompt of a real match equals the prompt rebuilt at that history."""
    from arena.runner import plan_matches, play
    from evaluation.exploitability import turn_at

    spec = f"llm:tiny-llama,constrained=true,mode={mode},seed=0"
    records = list(
        play(
            plan_matches("leduc_poker", ["llm", "cfr"], 4, seed=3),
            {"llm": make_agent(spec, "llm"), "cfr": make_agent("cfr")},
        )
    )
    fresh_agent = make_agent(spec, "llm")
    game = games.make("leduc_poker").game
    checked = 0
    for rec in records:
        env = games.make("leduc_poker")
        env.reset(seed=rec.seed)
        state = game.new_initial_state()
        for _player, action in env.moves:  # the deal
            state.apply_action(action)
        for t in rec.turns:
            if t.agent == "llm":
                turn = turn_at(
                    fresh_agent,
                    "leduc_poker",
                    {},
                    state,
                    f"check{checked}",
                    np.random.default_rng(0),
                )
                assert fresh_agent.prompt_messages(turn) == t.messages
                fresh_agent.end_match(f"check{checked}")
                checked += 1
            env.step(t.action)
            state = game.new_initial_state()
            for _, action in env.moves:
                state.apply_action(action)
    assert checked >= 8


# --- blunders and social metrics --------------------------------------------------------


# X: 0, 1; O: 3, 4; X to move: 2 wins; 5 blocks O but only draws; 6, 7, 8 lose -> 4 of 5 blunders.
# X: 0, 1; O: 4; O to move: only 2 holds the draw -> 5 of 6 blunders.
POSITIONS = [[0, 3, 1, 4], [0, 4, 1]]


def test_blunder_rate_of_minimax_is_0_and_of_random_the_hand_computed_value():
    assert expected_blunder_rate(make_agent("random"), "tic_tac_toe", POSITIONS) == pytest.approx(
        (4 / 5 + 5 / 6) / 2
    )
    assert expected_blunder_rate(make_agent("minimax"), "tic_tac_toe", POSITIONS) == 0.0
    assert (
        expected_blunder_rate(make_agent("random"), "tic_tac_toe", [[]]) == 0.0
    )  # every first move draws
    records = list(
        play_suite(
            {"agent": make_agent("minimax"), "baseline": make_agent("random")},
            [EvalGame("tic_tac_toe", opponents=["random", "mcts:20"])],
            matches=6,
        )
    )
    mine = {r.seat: r for r in blunder_rows(records, "agent")}
    assert (
        mine["all"].blunders == 0
        and mine["all"].moves > 20
        and set(mine) == {"player_0", "player_1", "all"}
    )
    assert {r.seat: r for r in blunder_rows(records, "baseline")}["all"].blunders > 0


def test_social_metrics_of_tit_for_tat_against_always_defect():
    records = list(
        play_suite(
            {"agent": make_agent("tit_for_tat")},
            [EvalGame("prisoners_dilemma", opponents=["always_defect", "tit_for_tat"])],
            matches=4,
        )
    )
    rows = {r.opponent: r for r in social_rows(records, "agent")}
    exploited = rows["always_defect"]
    # round 1: C vs D (0 + 5); rounds 2-10: D vs D (1 + 1): 23 of the optimum 10 x 2R = 60
    assert exploited.cooperation == 0.1 and exploited.sucker == 0.1 and exploited.mutual == 0.0
    assert (
        exploited.welfare == pytest.approx(23 / 60)
        and exploited.return_gap == 5.0
        and exploited.agent_share == pytest.approx(9 / 23)
    )
    assert (
        rows["tit_for_tat"].mutual,
        rows["tit_for_tat"].welfare,
        rows["tit_for_tat"].fairness,
    ) == (1.0, 1.0, 1.0)


def test_pareto_efficiency_of_a_two_good_allocation():
    values = np.array([[1.0, 3.0], [3.0, 1.0]])
    assert pareto_efficient(np.array([[0, 2], [2, 0]]), values)  # each holds what it values more
    assert not pareto_efficient(np.array([[2, 0], [0, 2]]), values)  # swapping helps both


def test_negotiation_rows_report_agreement_and_efficiency():
    records = list(
        play_suite(
            {"agent": make_agent("random")},
            [EvalGame("negotiation", opponents=["random"])],
            matches=30,
        )
    )
    (row,) = social_rows(records, "agent")
    assert row.matches == 30 and 0 <= row.agreement <= 1 and 0 <= row.pareto <= 1 and row.gains <= 1


# --- paired matches and the store -------------------------------------------------------


def test_every_evaluated_agent_meets_the_same_matches(tmp_path):
    """Same seeds for agent and baseline; the opponent draws from its own stream, so an
    agent that draws nothing (always Bet) and one that draws (random) face the same replies."""
    a, b = (
        plans("agent", [EvalGame("kuhn_poker", opponents=["random"])], 6, 0),
        plans("baseline", [EvalGame("kuhn_poker", opponents=["random"])], 6, 0),
    )
    assert [(p.seed, p.seats.index("agent")) for p in a] == [
        (p.seed, p.seats.index("baseline")) for p in b
    ]
    assert [p.seats.index("agent") for p in a] == [0, 1, 0, 1, 0, 1] and a[0].seed == a[
        1
    ].seed != a[2].seed
    records = list(
        play_suite(
            {"agent": Always(1), "baseline": make_agent("random")},
            [EvalGame("kuhn_poker", opponents=["random"])],
            matches=60,
        )
    )
    by_key = {}
    for r in records:
        who = "agent" if "agent" in r.seats.values() else "baseline"
        by_key.setdefault(r.match_id.split("|", 1)[1], {})[who] = r
    same = 0
    for pair in by_key.values():
        a, b = pair["agent"].turns, pair["baseline"].turns
        if (
            a[0].agent != "random" and a[0].action == b[0].action
        ):  # both bet first: the opponent's reply must match
            assert a[1].action == b[1].action
            same += 1
    assert same >= 5
    # two identical agents: identical matches, every paired difference 0
    twin = run_eval(
        make_config(
            {
                "agent": "random",
                "baseline": "random",
                "games": [{"name": "tic_tac_toe", "opponents": ["random"]}],
                "matches": 10,
                "out": str(tmp_path),
            }
        )
    )
    assert all(
        getattr(p, m).diff == 0 and getattr(p, m).ci == (0.0, 0.0)
        for p in paired(twin.records)
        for m in MEASURES
    )


def _rec(k, seats, outcome, returns):
    return MatchRecord(
        f"policy|00.tic_tac_toe|00.random|{k:05d}",
        "tic_tac_toe",
        {},
        k,
        seats,
        outcome=outcome,
        returns=returns,
    )


def test_summary_rows_count_both_seats():
    """The flat row a training run logs per (game, opponent): the pooled cell and the per-seat rates."""
    recs = [
        _rec(
            0,
            {"player_0": "policy", "player_1": "random"},
            {"player_0": "win", "player_1": "loss"},
            {"player_0": 1.0, "player_1": -1.0},
        ),
        _rec(
            1,
            {"player_0": "random", "player_1": "policy"},
            {"player_0": "draw", "player_1": "draw"},
            {"player_0": 0.0, "player_1": 0.0},
        ),
        _rec(
            2,
            {"player_0": "policy", "player_1": "random"},
            {"player_0": "loss", "player_1": "win"},
            {"player_0": -1.0, "player_1": 1.0},
        ),
        _rec(
            3,
            {"player_0": "random", "player_1": "policy"},
            {"player_0": "loss", "player_1": "win"},
            {"player_0": -1.0, "player_1": 1.0},
        ),
    ]
    [s] = summary(cells(recs, "policy"))
    assert (s["game"], s["opponent"], s["wins"], s["draws"], s["losses"], s["games"]) == (
        "tic_tac_toe",
        "random",
        2,
        1,
        1,
        4,
    )
    assert s["non_losing"] == 0.75 and (s["ci_low"], s["ci_high"]) == pytest.approx(wilson(3, 4))
    assert s["non_losing_by_seat"] == {"player_0": 0.5, "player_1": 1.0} and s["win_rate"] == 0.5
    assert s["mean_return"] == pytest.approx(0.25)


def test_self_opponent_seats_the_evaluated_agent_everywhere():
    """`self`: the agent in every seat (Hanabi, self-play); only its own seat k mod n counts."""
    agent = make_agent("random")
    records = list(
        play_suite(
            {"agent": agent}, [EvalGame("tic_tac_toe", opponents=["self"])], matches=4, seed=5
        )
    )
    assert [sorted(r.seats.values()) for r in records] == [["agent", "self"]] * 4
    [pooled] = [
        c
        for c in evaluate(agent, [EvalGame("tic_tac_toe", opponents=["self"])], 4, 5)
        if c.seat == "all"
    ]
    assert pooled.matches == 4 and pooled.opponent == "self"
    with pytest.raises(ValueError, match="opponent 'self' needs a single evaluated agent"):
        list(
            play_suite(
                {"agent": agent, "baseline": agent},
                [EvalGame("tic_tac_toe", opponents=["self"])],
                matches=2,
            )
        )


def _arena(*argv, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_kill_9_then_resume_loses_and_duplicates_nothing(tmp_path):
    args = [
        "eval",
        "--agent",
        "random",
        "--games",
        "tic_tac_toe",
        "--opponents",
        "mcts:40",
        "--matches",
        "40",
        "--concurrency",
        "2",
    ]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    proc = _arena(*args, "--out", str(killed))
    deadline = time.time() + 60
    while _stored(killed / "eval.db") < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the evaluation finished before it could be killed: make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 6 <= _stored(killed / "eval.db") < 40
    assert _arena(*args, "--out", str(killed)).wait() == 0
    assert _arena(*args, "--out", str(whole)).wait() == 0
    ids = [r.match_id for r in read_jsonl(killed / "eval.jsonl")]
    assert len(ids) == len(set(ids)) == 40 == _stored(killed / "eval.db")
    # the resumed evaluation is the uninterrupted one, row for row
    assert json.loads((killed / "eval.json").read_text()) == json.loads(
        (whole / "eval.json").read_text()
    )


def test_ctrl_c_says_how_many_matches_are_kept_and_how_to_resume(tmp_path):
    args = ["eval", "--agent", "random", "--games", "tic_tac_toe", "--opponents", "mcts:40"]
    args += ["--matches", "200", "--concurrency", "2", "--out", str(tmp_path)]  # seconds of play
    proc = _arena(*args, text=True, preexec_fn=default_sigint)
    deadline = time.time() + 60
    while _stored(tmp_path / "eval.db") < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the evaluation finished before Ctrl-C: make it longer"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    kept = _stored(tmp_path / "eval.db")
    assert proc.returncode == 130 and 4 <= kept < 200
    assert err.strip().splitlines()[-1] == (
        f"arena eval: interrupted: {kept} of the 200 matches scheduled so far are kept in "
        f"{tmp_path / 'eval.db'}; run the same command to resume"
    )
    out, _ = _arena(*args, text=True).communicate(timeout=300)
    assert played_now(out) == 200 - kept and "200 in all" in out


def played_now(out: str) -> int:
    """Matches a resumed run played plus those it recovered from the trajectories (a Ctrl-C between
    a match's JSONL line and its store row leaves one there)."""
    played = int(re.search(r"(\d+) match\(es\) played now", out)[1])
    recovered = re.search(r"recovered (\d+) match\(es\)", out)
    return played + (int(recovered[1]) if recovered else 0)


def test_matches_in_the_jsonl_but_not_the_store_are_recovered_not_replayed(tmp_path):
    config = make_config(
        {
            "agent": "random",
            "games": [{"name": "kuhn_poker", "opponents": ["cfr"]}],
            "matches": 8,
            "out": str(tmp_path),
        }
    )
    first = run_eval(config)
    assert (first.played, first.recovered) == (8, 0)
    with sqlite3.connect(
        tmp_path / "eval.db"
    ) as conn:  # killed after the JSONL append, before the store insert
        conn.execute("DELETE FROM matches WHERE match_id = ?", (first.records[3].match_id,))
    again = run_eval(config)
    assert (again.played, again.recovered) == (0, 1) and again.records == first.records
    for name in (
        "eval.db",
        "eval.db-wal",
        "eval.db-shm",
    ):  # the store lost: rebuilt from the trajectories
        (tmp_path / name).unlink(missing_ok=True)
    rebuilt = run_eval(config)
    assert (rebuilt.played, rebuilt.recovered) == (0, 8) and rebuilt.records == first.records
    more = run_eval(
        make_config(
            {
                **config.__dict__,
                "matches": 10,
                "games": [{"name": "kuhn_poker", "opponents": ["cfr"]}],
            }
        )
    )
    assert (more.played, more.recovered) == (2, 0) and more.records[
        :8
    ] == first.records  # --matches may grow on resume


# --- the command line -------------------------------------------------------------------


def _played(
    who: str, k: int, outcome: str, valid: list[bool], seat: str = "player_0"
) -> MatchRecord:
    other = "player_1" if seat == "player_0" else "player_0"
    turns = [
        TurnRecord(index=i, player=seat, agent=who, move="x", action=0, valid=v, token_ids=[1])
        for i, v in enumerate(valid)
    ]
    ret = {"win": 1.0, "loss": -1.0, "draw": 0.0}[outcome]
    return MatchRecord(
        match_id=f"{who}|00.kuhn_poker|00.random|{k:05d}",
        game="kuhn_poker",
        params={},
        seed=k,
        seats={seat: who, other: "random"},
        turns=turns,
        returns={seat: ret, other: -ret},
        outcome={seat: outcome, other: {"win": "loss", "loss": "win", "draw": "draw"}[outcome]},
    )


def test_paired_non_losing_win_and_legal_move_differences_by_hand():
    # 4 paired matches: the agent wins 3 (one was a baseline loss), the baseline 2; legal moves 4/4 vs 2/4
    recs = []
    for k, (a, b) in enumerate([("win", "loss"), ("win", "win"), ("win", "win"), ("loss", "loss")]):
        recs.append(_played("agent", k, a, [True, True] if k % 2 else [True]))
        recs.append(_played("baseline", k, b, [False, True] if k % 2 else [k != 0]))
    recs.append(
        _played("agent", 4, "loss", [])
    )  # no move (a forfeit before its turn, say): no legal-move rate
    recs.append(_played("baseline", 4, "loss", [True]))
    rows = paired(recs)
    cell = [r for r in rows if r.seat == "all" and r.opponent == "random"][0]
    assert rows[-1].opponent == "all" and cell.pairs == 5
    nl = cell.non_losing
    assert (nl.baseline, nl.agent, nl.diff) == (0.4, 0.6, pytest.approx(0.2))
    assert (cell.win_rate.baseline, cell.win_rate.agent) == (0.4, 0.6)  # no draws: as non-losing
    assert cell.mean_return.diff == pytest.approx(0.4)  # (+2 + 0 + 0 + 0 + 0) / 5
    # per-match legal-move rates of the 4 pairs where both moved: agent 1, 1, 1, 1; baseline 0 (k=0), 0.5, 1, 0.5
    lg = cell.legal_move_rate
    assert lg.agent == 1.0 and lg.baseline == pytest.approx(0.5) and lg.diff == pytest.approx(0.5)
    assert lg.ci[0] > 0 and lg.verdict == "better"
    # one stratum, differences {0, 1}: the bootstrap mean is Binomial(5, 1/5)/5, its 2.5% quantile 0
    assert nl.ci == pytest.approx((0.0, 0.6)) and nl.verdict == "no detectable difference"


def test_arena_eval_with_a_tiny_llm_baseline_and_exploitability(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        arena_main(
            [
                "eval",
                "--agent",
                "cfr",
                "--baseline",
                "llm:tiny-llama,constrained=true,max_new_tokens=3",
                "--games",
                "kuhn_poker",
                "--opponents",
                "random",
                "--matches",
                "6",
                "--exploitability",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "agent - baseline" in text and "exploitability" in text
    rows = json.loads((out / "eval.json").read_text())
    cells = [r for r in rows if r["kind"] == "cell"]
    assert {(r["agent"], r["seat"]) for r in cells} == {
        (w, s) for w in ("agent", "baseline") for s in ("player_0", "player_1", "all")
    }
    assert all(r["matches"] == (6 if r["seat"] == "all" else 3) for r in cells)
    llm = [r for r in cells if r["agent"] == "baseline"][0]
    assert llm["tokens_per_move"] > 0
    expl = {r["agent"]: r for r in rows if r["kind"] == "exploitability"}
    assert (
        expl["agent"]["exploitability"] <= 0.01
        and expl["baseline"]["method"] == "exact"
        and expl["baseline"]["game"] == "kuhn_poker"
    )
    pooled = [r for r in rows if r["kind"] == "paired" and r["opponent"] == "all"][0]
    for m in MEASURES:  # every paired measure, with its CI, in eval.json and the printed table
        assert pooled[m]["ci"][0] <= pooled[m]["diff"] <= pooled[m]["ci"][1] and m in pooled
    value, interval = _num(  # piped: the value above its CI
        pooled["legal_move_rate"]["diff"], pooled["legal_move_rate"]["ci"], "\n"
    ).split("\n")
    assert "non-losing" in text and "legal moves" in text and value in text and interval in text
    html = (out / "eval.html").read_text()
    assert html.count("data:image/png;base64,") == 2  # the rates and the forest plot
    # a rerun plays nothing and reads the exploitability from the store
    assert (
        arena_main(
            [
                "eval",
                "--agent",
                "cfr",
                "--baseline",
                "llm:tiny-llama,constrained=true,max_new_tokens=3",
                "--games",
                "kuhn_poker",
                "--opponents",
                "random",
                "--matches",
                "6",
                "--exploitability",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "0 match(es) played now" in capsys.readouterr().out


def test_a_store_refuses_to_resume_once_the_run_it_evaluated_has_a_newer_checkpoint(
    tmp_path, capsys
):
    """`llm:RUN` plays RUN's newest checkpoint: after more training a resume would mix two policies' matches."""
    from agents import checkpoint, checkpoint_of
    from agents.models import tiny_llama
    from training.league import League
    from training.learner import Learner
    from training.learner_config import LearnerConfig

    model, tok = tiny_llama(0)
    run_state = {
        "league": League().state_dict(),
        "state": {"advantage": {}, "elapsed": 1.0, "games": 2},
    }
    learner = Learner(model, tok, LearnerConfig(precision="float32"))
    ckpts = tmp_path / "run" / "checkpoints"
    checkpoint.save(ckpts, learner, 1, config={"model": "tiny-llama"}, **run_state)
    spec = f"llm:{tmp_path / 'run'},constrained=true,max_new_tokens=3"
    assert checkpoint_of(spec) == f"{(ckpts / 'step_00000001').resolve()} (step 1)"
    assert checkpoint_of("random") is None and checkpoint_of("llm:tiny-llama") is None
    args = [
        "eval",
        "--agent",
        spec,
        "--games",
        "kuhn_poker",
        "--opponents",
        "random",
        "--matches",
        "2",
        "--out",
        str(tmp_path / "eval"),
    ]
    assert arena_main(args) == 0
    assert (
        arena_main(args) == 0 and "0 match(es) played now" in capsys.readouterr().out
    )  # same checkpoint: resumes
    checkpoint.save(ckpts, learner, 2, config={"model": "tiny-llama"}, **run_state)
    assert arena_main(args) == 2
    err = capsys.readouterr().err
    assert (
        "step_00000001 (step 1)" in err
        and "step_00000002 (step 2)" in err
        and "another output path" in err
    )


def _trained_run(run: Path, games_: list[dict]) -> None:
    """A training run folder with one checkpoint and a best/ policy of the tiny Llama, its config
    naming `games_` (as `arena train` saves it)."""
    from agents import checkpoint
    from agents.models import tiny_llama
    from training.league import League
    from training.learner import Learner
    from training.learner_config import LearnerConfig

    model, tok = tiny_llama(0)
    learner = Learner(model, tok, LearnerConfig(precision="float32"))
    config = {
        "model": "tiny-llama",
        "games": games_,
        "agent": {"constrained": True, "max_new_tokens": 3},
    }
    state = {"advantage": {}, "elapsed": 1.0, "games": 2}
    checkpoint.save(
        run / "checkpoints", learner, 1, config=config, league=League().state_dict(), state=state
    )
    checkpoint.save_policy(run / "best", learner, 1, config=config)


def test_eval_plays_a_checkpoint_with_the_game_params_it_trained_on(tmp_path, capsys):
    """`arena eval --agent llm:RUN/best --baseline llm:RUN --suite train`: tic-tac-toe on the board
    the run trained on, Kuhn as it is; --param KEY=VALUE goes to the games that have KEY,
    --param GAME.KEY=VALUE to one game."""
    run = tmp_path / "run"
    _trained_run(run, [{"name": "tic_tac_toe", "params": {"board": "relative"}}])
    base = ["eval", "--agent", f"llm:{run}/best", "--baseline", f"llm:{run}", "--suite", "train"]
    base += ["--opponents", "random", "--matches", "2"]

    def params(out: Path) -> dict:
        return {r.game: r.params for r in read_jsonl(out / "eval.jsonl")}

    assert arena_main([*base, "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert params(tmp_path / "a") == {"tic_tac_toe": {"board": "relative"}, "kuhn_poker": {}}
    assert "warning" not in captured.err
    assert f"tic_tac_toe: board=relative, as llm:{run}/best trained it" in captured.out
    # a flag over the checkpoint's params: for every game that has the parameter, or for one game
    assert arena_main([*base, "--param", "board=grid", "--out", str(tmp_path / "b")]) == 0
    assert params(tmp_path / "b") == {"tic_tac_toe": {"board": "grid"}, "kuhn_poker": {}}
    captured = capsys.readouterr()
    assert "--param board=grid: for tic_tac_toe only" in captured.out
    assert "trained on tic_tac_toe with params {'board': 'relative'}" in captured.err
    argv = [*base, "--param", "tic_tac_toe.board=line", "--out", str(tmp_path / "c")]
    assert arena_main(argv) == 0
    assert params(tmp_path / "c") == {"tic_tac_toe": {"board": "line"}, "kuhn_poker": {}}
    capsys.readouterr()
    for flag, message in (
        ("boord=grid", "tic_tac_toe has no parameter 'boord'"),
        ("kuhn_poker.board=grid", "kuhn_poker has no parameter 'board'"),
        ("chess.board=grid", "--param chess.board: this evaluation plays no chess"),
    ):
        assert arena_main([*base, "--param", flag, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
    # arena play too
    out = tmp_path / "play.jsonl"
    argv = ["play", "tic_tac_toe", "--agents", f"llm:{run}", "random", "--matches", "2"]
    assert arena_main([*argv, "--out", str(out)]) == 0
    assert [r.params for r in read_jsonl(out)] == [{"board": "relative"}] * 2
    assert "warning" not in capsys.readouterr().err


def test_a_missing_checkpoint_or_an_agent_typo_leaves_no_store(tmp_path, capsys):
    for argv, message in (
        (
            ["--agent", f"llm:{tmp_path}/run/best"],
            f"no model folder or training checkpoint at {tmp_path}/run/best ({tmp_path} has no run)",
        ),
        (
            ["--agent", "random", "--baseline", "mtcs:10"],
            "unknown agent 'mtcs'; did you mean mcts?",
        ),
        (["--agent", "random", "--opponents", "cfrr"], "unknown agent 'cfrr'; did you mean cfr?"),
    ):
        argv += ["--games", "kuhn_poker", "--out", str(tmp_path / "e")]
        assert arena_main(["eval", *argv]) == 2
        out, err = capsys.readouterr()
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert "store" not in out and not (tmp_path / "e").exists()


def test_eval_config_file_and_one_line_errors(tmp_path, capsys):
    cfg = tmp_path / "e.yaml"
    cfg.write_text("agent: random\ngames:\n  - {name: kuhn_poker, opponents: [cfr]}\nmatches: 4\n")
    assert arena_main(["eval", str(cfg), "--out", str(tmp_path / "o")]) == 0
    rows = json.loads((tmp_path / "o" / "eval.json").read_text())
    assert {r["opponent"] for r in rows if r["kind"] == "cell"} == {"cfr"}
    capsys.readouterr()
    for argv, message in (
        (["eval", "--games", "kuhn_poker"], "needs an agent"),
        (["eval", "--agent", "random", "--games", "kuhn_pokr"], "did you mean kuhn_poker"),
        (["eval", "--agent", "random", "--matches", "0"], "matches must be a positive integer"),
        (["eval", str(tmp_path / "missing.yaml")], "no evaluation config"),
    ):
        assert arena_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    cfg.write_text("agent: random\nmatchs: 3\n")
    assert (
        arena_main(["eval", str(cfg)]) == 2 and "unknown key(s) matchs" in capsys.readouterr().err
    )


def test_eval_param_sets_game_parameters_over_a_configs(tmp_path, capsys):
    # always_defect against always_cooperate earns T every round: the return counts the rounds and T
    out = tmp_path / "o"
    assert (
        arena_main(
            [
                "eval",
                "--agent",
                "always_defect",
                "--games",
                "prisoners_dilemma",
                "--opponents",
                "always_cooperate",
                "--param",
                "rounds=3",
                "--param",
                "T=7",
                "--matches",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    recs = list(read_jsonl(out / "eval.jsonl"))
    assert len(recs) == 2 and all(r.params == {"rounds": 3, "T": 7} for r in recs)
    cell = [
        r
        for r in json.loads((out / "eval.json").read_text())
        if r["kind"] == "cell" and r["seat"] == "all"
    ][0]
    assert cell["mean_return"] == 21.0
    cfg = tmp_path / "e.yaml"  # the flag wins over the config's params and keeps its others
    cfg.write_text(
        "agent: always_defect\ngames:\n  - {name: prisoners_dilemma, opponents: [always_cooperate], params: {rounds: 5, T: 6}}\nmatches: 2\n"
    )
    assert arena_main(["eval", str(cfg), "--param", "rounds=2", "--out", str(tmp_path / "c")]) == 0
    assert {
        json.dumps(r.params, sort_keys=True) for r in read_jsonl(tmp_path / "c" / "eval.jsonl")
    } == {'{"T": 6, "rounds": 2}'}
    capsys.readouterr()
    for flag, message in (
        ("round=3", "prisoners_dilemma has no parameter 'round'"),
        ("rounds", "--param takes KEY=VALUE"),
    ):
        assert (
            arena_main(
                [
                    "eval",
                    "--agent",
                    "random",
                    "--games",
                    "prisoners_dilemma",
                    "--param",
                    flag,
                    "--out",
                    str(tmp_path / "x"),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x" / "eval.jsonl").exists()  # refused before anything was played


def test_default_suites_follow_the_catalogue_split():
    from evaluation.suites import suite

    assert [(g.name, g.opponents) for g in suite("held_out")] == [
        ("connect_four", ["random", "mcts:100", "mcts:1000"]),
        ("leduc_poker", ["random", "cfr"]),
    ]
    assert [(g.name, g.opponents) for g in suite("train")] == [
        ("tic_tac_toe", ["random", "mcts:100", "mcts:1000"]),
        ("kuhn_poker", ["random", "cfr"]),
    ]
    assert len(suite("all")) == 4


def test_cooperation_ci_is_over_matches_and_holds_the_rate():
    records = list(
        play_suite(
            {"agent": make_agent("random")},
            [EvalGame("prisoners_dilemma", opponents=["tit_for_tat"])],
            matches=20,
        )
    )
    (row,) = social_rows(records, "agent")
    rates = [sum(1 for t in r.turns if t.agent == "agent" and t.action == 0) / 10 for r in records]
    assert row.cooperation == pytest.approx(np.mean(rates))
    lo, hi = row.cooperation_ci
    assert lo < row.cooperation < hi and hi - lo < 0.5
    records = list(
        play_suite(
            {"agent": make_agent("tit_for_tat")},
            [EvalGame("prisoners_dilemma", opponents=["always_defect"])],
            matches=4,
        )
    )
    assert social_rows(records, "agent")[0].cooperation_ci == pytest.approx(
        (0.1, 0.1)
    )  # every match: C once, then D
    # a rate's interval stays inside [0, 1]: one cooperative match among defecting ones puts the raw t interval below 0
    records = list(
        play_suite(
            {"agent": make_agent("always_defect")},
            [EvalGame("prisoners_dilemma", opponents=["always_defect"])],
            matches=6,
        )
    )
    records += list(
        play_suite(
            {"agent": make_agent("tit_for_tat")},
            [EvalGame("prisoners_dilemma", opponents=["always_defect"])],
            matches=1,
        )
    )
    lo, hi = social_rows(records, "agent")[0].cooperation_ci
    assert lo == 0.0 < hi < 1.0


@pytest.mark.parametrize(
    "strategy, expected", [("tit_for_tat", 1.0), ("always_cooperate", 0.0), ("grim_trigger", None)]
)
def test_reciprocity_is_cooperation_after_cooperation_minus_after_defection(strategy, expected):
    records = list(
        play_suite(
            {"agent": make_agent(strategy)},
            [EvalGame("prisoners_dilemma", opponents=["random"])],
            matches=10,
        )
    )
    (row,) = social_rows(records, "agent")
    if (
        expected is None
    ):  # grim trigger forgives nothing: below tit-for-tat's 1, above an unconditional 0
        assert 0.0 < row.reciprocity < 1.0
    else:
        assert row.reciprocity == expected
    only_cooperation = list(
        play_suite(
            {"agent": make_agent(strategy)},
            [EvalGame("prisoners_dilemma", opponents=["always_cooperate"])],
            matches=2,
        )
    )
    assert (
        social_rows(only_cooperation, "agent")[0].reciprocity is None
    )  # nobody defected: undefined
