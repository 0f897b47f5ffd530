"""The memory-1 profile and the nearest named strategy (`evaluation.social`): the scripted
strategies' profiles by hand, Wilson intervals by hand, exact profiles from an agent's own
distributions (a stochastic memory-1 bot, the tiny constrained Llama), and `arena eval`'s
rows, table and page."""

import json
import math

import numpy as np
import pytest

import games
from agents import make_agent
from agents.base import PendingTurn, decision
from cli.main import main as arena_main
from evaluation.run import play_suite
from evaluation.social import NAMED, STATES, memory1_profile, nearest_strategy, social_rows
from evaluation.suites import EvalGame

Z2 = 1.959964**2  # z² of a 95% interval


def profile_of(strategy: str, opponents: list[str], matches: int = 10, exact: bool = False):
    records = list(
        play_suite(
            {"agent": make_agent(strategy)},
            [EvalGame("prisoners_dilemma", opponents=opponents)],
            matches=matches,
            exact_probs=exact,
        )
    )
    return records, memory1_profile(records, "agent")


# --- named strategies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy, first, expected, nearest",
    [
        # C, D after C and D of the last round (own move first): copy the other's move
        ("tit_for_tat", 1.0, (1, 0, 1, 0), "tit_for_tat"),
        # stay after R (CC) and T (DC), shift after S (CD) and P (DD)
        ("win_stay_lose_shift", 1.0, (1, 0, 0, 1), "win_stay_lose_shift"),
        # cooperates until the other defects once, then never again: C only after CC
        ("grim_trigger", 1.0, (1, 0, 0, 0), "grim_trigger"),
        # never cooperates: only DC and DD are visited, where grim trigger also defects
        ("always_defect", 0.0, (None, None, 0, 0), "grim_trigger or always_defect"),
        # never defects: only CC and CD are visited; generous TFT is 2/3 away at CD
        ("always_cooperate", 1.0, (1, 1, None, None), "always_cooperate"),
    ],
)
def test_profile_of_each_scripted_strategy_against_random(strategy, first, expected, nearest):
    _, prof = profile_of(strategy, ["random"])
    assert prof.method == "counted"  # social bots have no action_probabilities
    assert prof.first.p == first and prof.first.n == 10
    assert tuple(prof.vector()[s] for s in STATES) == expected
    for s, want in zip(STATES, expected):
        assert (getattr(prof, s).n == 0) == (want is None)
    assert nearest_strategy(prof.vector()) == (nearest, 0.0)


def test_visits_and_wilson_intervals_of_tit_for_tat_against_always_defect():
    _, prof = profile_of("tit_for_tat", ["always_defect"], matches=4)
    # per match: round 1 C; round 2 after (C, D): D; rounds 3-10 after (D, D): D
    assert (prof.first.p, prof.first.n, prof.CD.p, prof.CD.n, prof.DD.p, prof.DD.n) == (
        1.0,
        4,
        0.0,
        4,
        0.0,
        32,
    )
    assert prof.CC.p is None and prof.DC.p is None and prof.CC.ci is None
    # Wilson with k = 0: [0, z² / (n + z²)]; with k = n: [n / (n + z²), 1]
    assert prof.DD.ci == pytest.approx((0.0, Z2 / (32 + Z2)), abs=1e-6)
    assert prof.CD.ci == pytest.approx((0.0, Z2 / (4 + Z2)), abs=1e-6)
    assert prof.first.ci == pytest.approx((4 / (4 + Z2), 1.0), abs=1e-6)
    # every strategy that defects after CD and DD fits
    name, distance = nearest_strategy(prof.vector())
    assert name == "tit_for_tat or grim_trigger or always_defect or alternation" and distance == 0


def test_nearest_strategy_distance_by_hand():
    # the alternation seen in training: D after CC, C after (D, C), else D
    name, d = nearest_strategy({"CC": 0.1, "CD": 0.05, "DC": 0.9, "DD": 0.05})
    assert name == "alternation" and d == pytest.approx(math.sqrt(0.01 + 0.0025 + 0.01 + 0.0025))
    # a noisy tit-for-tat: sqrt(3 x 0.05²) from tit-for-tat; generous TFT is 1/3 - 0.05 off at CD
    name, d = nearest_strategy({"CC": 0.95, "CD": 0.05, "DC": 0.95, "DD": 0.05})
    assert name == "tit_for_tat" and d == pytest.approx(0.05 * math.sqrt(4))
    name, d = nearest_strategy({"CC": 1.0, "CD": 0.3, "DC": 1.0, "DD": 0.35})
    assert name == "generous_tit_for_tat" and d == pytest.approx(
        math.hypot(0.3 - 1 / 3, 0.35 - 1 / 3)
    )
    assert nearest_strategy({s: None for s in STATES}) == (None, None)
    assert len(NAMED) == 7 and all(len(v) == 4 for v in NAMED.values())


# --- exact profiles from the agent's own distributions --------------------------------------


class Memory1Bot:
    """Cooperates with probability p[state] (state: "first", or the last round, own move first)
    and says so through `action_probabilities`."""

    def __init__(self, p: dict[str, float], name: str = "agent"):
        self.p, self.name = p, name

    def _p(self, turn: PendingTurn) -> float:
        history = turn.env.cooperation_history(turn.player)
        if not history:
            return self.p["first"]
        mine, others = history[-1]
        return self.p[("C" if mine else "D") + ("C" if all(others) else "D")]

    def act(self, turns):
        return [
            decision(t, self.name, t.env.social_action(t.player, t.rng.random() < self._p(t)))
            for t in turns
        ]

    def action_probabilities(self, turns):
        out = []
        for t in turns:
            p = self._p(t)
            coop = t.env.social_action(t.player, True)
            out.append({coop: p, t.env.social_action(t.player, False): 1 - p})
        return out

    def end_match(self, match_id):
        pass


ALTERNATION = {"first": 0.6, "CC": 0.1, "CD": 0.05, "DC": 0.9, "DD": 0.05}


def _counted_by_hand(records) -> dict[str, tuple[int, int]]:
    """(cooperations, visits) per state from the raw actions (0 = Cooperate), not the env."""
    out = {s: [0, 0] for s in STATES}
    for rec in records:
        seat = next(p for p, a in rec.seats.items() if a == "agent")
        mine = [t.action for t in rec.turns if t.player == seat]
        theirs = [t.action for t in rec.turns if t.player != seat]
        for k in range(1, len(mine)):
            state = "CD"[mine[k - 1]] + "CD"[theirs[k - 1]]
            out[state][0] += mine[k] == 0
            out[state][1] += 1
    return {s: tuple(v) for s, v in out.items()}


def test_exact_profile_is_the_policy_and_counting_agrees_within_wilson():
    spec = [EvalGame("prisoners_dilemma", opponents=["random", "tit_for_tat"])]
    exact = list(play_suite({"agent": Memory1Bot(ALTERNATION)}, spec, matches=20, exact_probs=True))
    counted = list(play_suite({"agent": Memory1Bot(ALTERNATION)}, spec, matches=20))
    # asking for the distribution draws nothing: the very same matches
    assert [[t.action for t in r.turns] for r in exact] == [
        [t.action for t in r.turns] for r in counted
    ]
    mine = [t for r in exact for t in r.turns if t.agent == "agent"]
    assert all(sorted(a for a, _ in t.action_probs) == [0, 1] for t in mine)
    assert all(math.isclose(sum(p for _, p in t.action_probs), 1.0) for t in mine)
    assert not any(t.action_probs for r in exact for t in r.turns if t.agent != "agent")
    row = [r for r in social_rows(exact, "agent") if r.opponent == "all"][0]
    prof = row.profile
    assert prof.method == "exact"
    for s in (
        "first",
        *STATES,
    ):  # each visit counts the policy's own p: the mean is p, the CI a point
        rate = getattr(prof, s)
        assert rate.n > 0 and rate.p == pytest.approx(ALTERNATION[s])
        assert rate.ci == pytest.approx((ALTERNATION[s], ALTERNATION[s]))
    assert row.nearest == "alternation" and row.nearest_distance == pytest.approx(math.sqrt(0.025))
    by_hand = _counted_by_hand(counted)
    prof = memory1_profile(counted, "agent")
    assert prof.method == "counted"
    for s in STATES:
        k, n = by_hand[s]
        rate = getattr(prof, s)
        assert (rate.p, rate.n) == (k / n, n)
        assert rate.ci[0] <= ALTERNATION[s] <= rate.ci[1]
    # the same visits whichever way the rate is taken
    assert [getattr(prof, s).n for s in STATES] == [
        getattr(memory1_profile(exact, "agent"), s).n for s in STATES
    ]


def test_public_goods_profile_reads_all_the_others_and_is_exact_for_random():
    """With three players a state's second letter is whether both others cooperated (put in at
    least half the endowment)."""
    spec = [EvalGame("public_goods", params={"num_players": 3}, opponents=["random"])]
    tft = list(play_suite({"agent": make_agent("tit_for_tat")}, spec, matches=6))
    prof = memory1_profile(tft, "agent")
    assert prof.method == "counted" and tuple(prof.vector().values()) == (1, 0, 1, 0)
    # random contributes 0..10 uniformly: 5..10 cooperate, 6 of 11 in every state, exactly
    rnd = list(play_suite({"agent": make_agent("random")}, spec, matches=6, exact_probs=True))
    prof = memory1_profile(rnd, "agent")
    assert prof.method == "exact"
    assert all(getattr(prof, s).p == pytest.approx(6 / 11) for s in ("first", *STATES))


def test_tiny_llm_profile_is_exact_from_its_masked_softmax():
    agent = make_agent("llm:tiny-llama,constrained=true,temperature=1.0,max_new_tokens=3")
    spec = [
        EvalGame(
            "prisoners_dilemma", params={"rounds": 4}, opponents=["tit_for_tat", "always_defect"]
        )
    ]
    with_probs = list(play_suite({"agent": agent}, spec, matches=2, exact_probs=True))
    without = list(play_suite({"agent": agent}, spec, matches=2))
    assert [[t.action for t in r.turns] for r in with_probs] == [
        [t.action for t in r.turns] for r in without
    ]
    prof = memory1_profile(with_probs, "agent")
    assert prof.method == "exact" and memory1_profile(without, "agent").method == "counted"
    # each recorded P(C) is the agent's distribution at that turn, asked again on a fresh replay
    rec = with_probs[0]
    seat = next(p for p, a in rec.seats.items() if a == "agent")
    env = games.make(rec.game, **rec.params)
    env.reset(seed=rec.seed)
    firsts = []
    for t in rec.turns:
        if t.player == seat:
            (dist,) = agent.action_probabilities(
                [PendingTurn("again", env, seat, np.random.default_rng(0))]
            )
            # batched with other matches' turns in play, alone here: fp32 rounding of different
            # matmul shapes (~1e-5), far below what another turn's or an unmasked distribution gives
            assert dict((a, p) for a, p in t.action_probs) == pytest.approx(dist, abs=1e-4)
            firsts.append(dist[env.cooperate_action])
        env.step(t.action)
    agent.end_match("again")
    p_first = [
        dict(map(tuple, next(t for t in r.turns if t.agent == "agent").action_probs))[0]
        for r in with_probs
    ]
    assert prof.first.p == pytest.approx(np.mean(p_first)) and 0 < prof.first.p < 1
    assert firsts[0] == pytest.approx(p_first[0], abs=1e-4)


# --- arena eval ---------------------------------------------------------------------------


def test_arena_eval_reports_the_profile_and_the_nearest_strategy(tmp_path, capsys):
    out = tmp_path / "e"
    argv = ["eval", "--agent", "win_stay_lose_shift", "--games", "prisoners_dilemma"]
    argv += ["--opponents", "random", "always_defect", "--matches", "6", "--out", str(out)]
    assert arena_main(argv) == 0
    printed = capsys.readouterr().out
    assert "memory-1 profile" in printed and "WSLS" in printed
    rows = [r for r in json.loads((out / "eval.json").read_text()) if r["kind"] == "social"]
    assert [r["opponent"] for r in rows] == ["random", "always_defect", "all"]  # suite order
    pooled = rows[-1]
    assert pooled["nearest"] == "win_stay_lose_shift" and pooled["nearest_distance"] == 0.0
    assert pooled["profile"]["method"] == "counted"
    assert [pooled["profile"][s]["p"] for s in STATES] == [1.0, 0.0, 0.0, 1.0]
    # against always_defect alone WSLS plays C, D, C, D, ...: rounds 2, 4, 6, 8, 10 follow
    # (C, D) and it defects, rounds 3, 5, 7, 9 follow (D, D) and it cooperates
    ad = rows[1]["profile"]
    assert (ad["CD"]["p"], ad["DD"]["p"], ad["CC"]["p"]) == (0.0, 1.0, None)
    assert (ad["first"]["n"], ad["CD"]["n"], ad["DD"]["n"]) == (6, 6 * 5, 6 * 4)
    page = (out / "eval.html").read_text()
    assert "memory-1 profile" in page and "WSLS" in page
    assert "method:" not in page  # the profile has its own table, not a dict in the social one
