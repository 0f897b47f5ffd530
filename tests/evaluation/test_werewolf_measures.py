"""Werewolf measures on crafted matches, computed by hand, and `arena eval` on Werewolf."""

import json
import math

import pytest
from scipy.stats import binomtest
from scipy.stats import t as student_t

import games
from cli.main import main as arena_main
from core.records import MatchRecord, TurnRecord, read_jsonl
from evaluation.werewolf import werewolf_rows

W, S, D, V = "werewolf", "seer", "doctor", "villager"
SIX = [W, W, S, D, V, V]


def seed_dealing(roles):
    """A seed whose deal is `roles` (records replay from their seed)."""
    env = games.make("werewolf")
    for seed in range(5000):
        env.reset(seed=seed)
        if env.role_of == roles:
            return seed
    raise AssertionError("no seed deals these roles")


def crafted(k, seat, actions, seed):
    """Match k of agent "agent" against werewolf_heuristic, the agent in `seat`, these actions."""
    env = games.make("werewolf")
    env.reset(seed=seed)
    turns = []
    for a in actions:
        player = env.agent_selection
        turns.append(TurnRecord(len(turns), player, "", env.move_text(player, a), a))
        env.step(a)
    assert env.phase == "over"
    seats = {
        p: "agent" if i == seat else "werewolf_heuristic" for i, p in enumerate(env.possible_agents)
    }
    mid = f"agent|00.werewolf|00.werewolf_heuristic|{k:05d}"
    rets = {a: env._cumulative_rewards[a] for a in env.possible_agents}
    return MatchRecord(mid, "werewolf", {}, seed, seats, turns, rets)


# Match A: night 1 the wolves kill player_4; the seer (player_2) finds player_0 and says so; day 1
# ties (2 votes on player_2, 2 on player_0, 1 on player_3); night 2 the seer finds player_1 and is
# killed before it can tell: two wolves against two, the wolves win at dawn. Village votes: player_2
# -> 0, player_3 -> 0, player_5 -> 3: 2 of 3 on a werewolf.
MATCH_A = [4, 4, 0, 3, "hi", "hi", "player_0 is a werewolf.", "ok", "ok", 2, 2, 0, 0, 3]
MATCH_A += [2, 2, 1, 3]
# Match B: night 1 the doctor saves player_5; day 1 player_1 (a wolf) is voted out by the four
# village players; night 2 player_4 dies, the seer finds player_0 and says so; day 2 player_0 is
# voted out: the village wins. Village votes: 4 + 3, all on a werewolf.
MATCH_B = [5, 5, 3, 5, "hi", "hi", "hi", "hi", "hi", "hi", 4, 4, 1, 1, 1, 1]
MATCH_B += [4, 0, 2, "hi", "player_0 is a werewolf.", "hi", "hi", 2, 0, 0, 0]


def records():
    seed = seed_dealing(SIX)

    def resolve(actions):
        return [games.make("werewolf").ABSTAIN if a == "abstain" else a for a in actions]

    return [
        crafted(0, 2, resolve(MATCH_A), seed),  # the agent is the seer
        crafted(1, 4, resolve(MATCH_B), seed),  # a villager
        crafted(2, 0, resolve(MATCH_A), seed),  # a wolf
    ]


def wilson(k, n):
    return tuple(binomtest(k, n).proportion_ci(method="wilson"))


def test_rows_of_a_crafted_match_by_hand():
    rows = {r.role: r for r in werewolf_rows(records(), "agent")}
    assert list(rows) == ["werewolf", "seer", "villager", "all"]
    seer, villager, wolf, pooled = rows["seer"], rows["villager"], rows["werewolf"], rows["all"]
    assert (seer.matches, seer.win_rate, villager.win_rate, wolf.win_rate) == (1, 0.0, 1.0, 1.0)
    assert seer.win_ci == pytest.approx(wilson(0, 1)) and villager.win_ci == pytest.approx(
        wilson(1, 1)
    )
    assert pooled.win_rate == pytest.approx(2 / 3) and pooled.win_ci == pytest.approx(wilson(2, 3))
    # the agent's votes: the seer voted player_0 once (alive on day 1 only), the villager player_1
    assert (seer.votes, seer.on_wolves, seer.on_wolves_ci) == (1, 1.0, (1.0, 1.0))
    assert (villager.votes, villager.on_wolves) == (1, 1.0)
    assert wolf.votes == 1 and wolf.on_wolves is None  # player_0 voted player_2: not counted
    assert pooled.votes == 3 and pooled.on_wolves == 1.0
    # the village's votes at each table
    assert seer.village_on_wolves == pytest.approx(2 / 3) and villager.village_on_wolves == 1.0
    counts, sizes = [2, 7, 2], [3, 7, 3]
    rate = sum(counts) / sum(sizes)  # 11 / 13
    se = math.sqrt(sum((c - rate * n) ** 2 for c, n in zip(counts, sizes)) / (3 * 2)) / (13 / 3)
    half = student_t.ppf(0.975, 2) * se
    assert pooled.village_on_wolves == pytest.approx(11 / 13)
    assert pooled.village_on_wolves_ci == pytest.approx((rate - half, min(1.0, rate + half)))
    # the seer found two werewolves and told one before it died
    assert (seer.findings, seer.told, pooled.findings, pooled.told) == (2, 0.5, 2, 0.5)
    assert villager.findings is None and wolf.findings is None


def test_other_agents_and_games_are_left_out():
    assert werewolf_rows(records(), "nobody") == []
    assert all(
        r.agent == "werewolf_heuristic" for r in werewolf_rows(records(), "werewolf_heuristic")
    )


def test_arena_eval_on_werewolf_reports_the_rows(tmp_path, capsys):
    out = tmp_path / "ev"
    code = arena_main(
        ["eval", "--agent", "werewolf_heuristic,reveal=false", "--games", "werewolf",
         "--matches", "6", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert "win rate by role" in capsys.readouterr().out
    rows = [r for r in json.loads((out / "eval.json").read_text()) if r["kind"] == "werewolf"]
    pooled = next(r for r in rows if r["role"] == "all")
    held = sum(  # the agent plays a whole team: every seat it held counts
        a.split("#")[0] == "agent" for r in read_jsonl(out / "eval.jsonl") for a in r.seats.values()
    )
    assert held == 3 * (2 + 4)  # three deals, the wolves (2 of 6) and the village (4) of each
    assert pooled["opponent"] == "werewolf_heuristic" and pooled["matches"] == held
    assert sum(r["matches"] for r in rows if r["role"] != "all") == held
    seer = [r for r in rows if r["role"] == "seer"]
    assert all(r["told"] in (None, 0.0) for r in seer)  # a quiet seer names nobody
