"""Restarts from lost positions: the runner's replayed start, the buffer, the planning of a step."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_agent
from arena.runner import OPENING, MatchPlan, play
from training.config import parse_config
from training.league import League
from training.restarts import Position, RestartBuffer, lost_positions
from training.sections import Matches
from training.selfplay import plan_step


def random_matches(n: int, seed: int = 0):
    agents = {"a": make_agent("random"), "b": make_agent("random")}
    plans = [
        MatchPlan(f"m{i}", "tic_tac_toe", ["a", "b"] if i % 2 else ["b", "a"], seed=seed + i)
        for i in range(n)
    ]
    return sorted(play(plans, agents, concurrency=8), key=lambda r: r.match_id)


def test_lost_positions_are_the_moves_before_the_losers_last_move():
    records = random_matches(40)
    positions = lost_positions(records, "a")
    losses = [
        (r, p)
        for r in records
        for p, name in r.seats.items()
        if name == "a" and r.outcome[p] == "loss"
    ]
    assert len(positions) == len(losses) > 5
    for (rec, player), pos in zip(losses, positions):
        last = max(k for k, t in enumerate(rec.turns) if t.player == player)
        assert pos.actions == tuple(t.action for t in rec.turns[:last])
        assert rec.turns[last + 1 :] and all(
            t.player != player for t in rec.turns[last + 1 :]
        )  # the winner's move ends it
        assert (pos.game, pos.seed, pos.params) == ("tic_tac_toe", rec.seed, rec.params)
    assert not lost_positions(records, "nobody")


def test_a_restarted_match_replays_the_moves_then_the_loser_moves():
    rec = next(
        r
        for r in random_matches(40)
        if r.outcome.get("player_1") == "loss" and r.seats["player_1"] == "a"
    )
    pos = lost_positions([rec], "a")[0]
    replay = next(
        iter(
            play(
                [
                    MatchPlan(
                        "r",
                        "tic_tac_toe",
                        ["b", "a"] if rec.seats["player_0"] == "b" else ["a", "b"],
                        seed=pos.seed,
                        start=pos.actions,
                    )
                ],
                {"a": make_agent("random"), "b": make_agent("random")},
            )
        )
    )
    k = len(pos.actions)
    assert [t.agent for t in replay.turns[:k]] == [OPENING] * k
    assert [t.action for t in replay.turns[:k]] == list(pos.actions)
    assert (
        replay.turns[k].player == "player_1" and replay.turns[k].agent == "a"
    )  # the loser is to move


def test_a_start_with_an_illegal_move_is_one_clear_error():
    with pytest.raises(
        ValueError, match=r"start action 1 \(4\) of \[4, 4\] is not a legal move of tic_tac_toe"
    ):
        list(
            play(
                [MatchPlan("r", "tic_tac_toe", ["a", "b"], start=(4, 4))],
                {"a": make_agent("random"), "b": make_agent("random")},
            )
        )


def test_the_buffer_keeps_the_newest_positions_per_game_and_params_and_round_trips():
    buf = RestartBuffer({"tic_tac_toe": 3})
    rng = np.random.default_rng(0)
    assert buf.sample("tic_tac_toe", {}, rng) is None
    buf.add(
        [Position("tic_tac_toe", {}, i, (i,)) for i in range(5)]
        + [Position("tic_tac_toe", {"board": "relative"}, 9, (0, 1))]
    )
    assert len(buf) == 4
    assert {buf.sample("tic_tac_toe", {}, rng).actions for _ in range(50)} == {
        (2,),
        (3,),
        (4,),
    }  # the oldest two dropped
    assert buf.sample("tic_tac_toe", {"board": "relative"}, rng).actions == (0, 1)
    assert buf.sample("kuhn_poker", {}, rng) is None
    again = RestartBuffer({"tic_tac_toe": 3})
    again.load_state_dict(buf.state_dict())
    assert again.positions == buf.positions
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        RestartBuffer({"tic_tac_toe": 0})


TINY = {
    "model": "tiny-llama",
    "steps": 1,
    "games": [{"name": "tic_tac_toe", "opening": 3}],
    "matches_per_step": 40,
    "league": {"self_play": 0.3, "bots": ["random"]},
}


def league() -> League:
    lg = League()
    lg.add("random", "bot", "random")
    return lg


def test_plan_step_restarts_a_share_of_the_self_play_pairs_from_buffered_positions():
    buf = RestartBuffer()
    buf.add([Position("tic_tac_toe", {}, 100 + i, (i, 8)) for i in range(6)])
    plain_cfg = parse_config(TINY)
    plain = plan_step(
        Matches.of(plain_cfg),
        plain_cfg.league,
        league(),
        np.random.default_rng(0),
        step=3,
        restarts=buf,
    )
    assert all(not p.start for p, _ in plain)  # restarts 0: the buffer is not read ...
    assert [(p.match_id, p.seed, p.opening) for p, _ in plain] == [
        (p.match_id, p.seed, p.opening)
        for p, _ in plan_step(
            Matches.of(plain_cfg), plain_cfg.league, league(), np.random.default_rng(0), step=3
        )
    ]
    cfg = parse_config(
        {**TINY, "games": [{"name": "tic_tac_toe", "opening": 3, "restarts": 1.0, "branch": 2}]}
    )
    planned = plan_step(
        Matches.of(cfg), cfg.league, league(), np.random.default_rng(0), step=3, restarts=buf
    )
    selfplay = [p for p, o in planned if o is None]
    assert len(selfplay) == 12 and all(
        p.start in {(i, 8) for i in range(6)} and p.opening == 0 for p in selfplay
    )
    assert all(p.seed == 100 + p.start[0] for p in selfplay)  # the lost match's deal
    assert all(
        not p.start and p.opening == 0 for p, o in planned if o is not None
    )  # league matches start as usual
    groups = [
        selfplay[i : i + 4] for i in range(0, 12, 4)
    ]  # branch 2: two pairs (four matches) share a position
    assert all(len({p.start for p in g}) == 1 for g in groups)
    half = parse_config(
        {
            **TINY,
            "games": [{"name": "tic_tac_toe", "opening": 3, "restarts": 0.5}],
            "matches_per_step": 400,
        }
    )
    share = np.mean(
        [
            bool(p.start)
            for p, o in plan_step(
                Matches.of(half), half.league, league(), np.random.default_rng(1), 1, buf
            )
            if o is None
        ]
    )
    assert 0.35 < share < 0.65
    assert all(
        not p.start
        for p, _ in plan_step(
            Matches.of(cfg),
            cfg.league,
            league(),
            np.random.default_rng(0),
            step=3,
            restarts=RestartBuffer(),
        )
    )


def test_training_with_restarts_plays_matches_from_lost_positions(tmp_path, monkeypatch, tiny_run):
    """A short run: step 1 has nothing lost yet; from step 2 on, self-play matches start from lost positions."""
    import training.rollouts as rollouts
    import training.selfplay as selfplay
    from tests.tiny_run import quiet

    starts, original = [], rollouts.play

    def spy(plans, *args, **kwargs):
        plans = list(plans)
        starts.append([p.start for p in plans])
        yield from original(plans, *args, **kwargs)

    monkeypatch.setattr(rollouts, "play", spy)  # what the loop's play_step calls
    selfplay.train(
        tiny_run(
            "r",
            steps=3,
            eval={"every": 0},
            games=[{"name": "tic_tac_toe", "restarts": 1.0}],
        ),
        console=quiet(),
    )
    assert len(starts) == 3 and not any(starts[0])
    assert all(any(s) for s in starts[1:])


def test_restarts_from_league_losses_only(tmp_path, monkeypatch, tiny_run):
    """`restart_from: league`: the buffer is fed only the matches against league opponents (the bot, snapshots)."""
    import training.selfplay as selfplay
    from tests.tiny_run import quiet

    added, original = [], selfplay.lost_positions

    def spy(records, agent):
        added.append([r.seats for r in records])
        return original(records, agent)

    monkeypatch.setattr(selfplay, "lost_positions", spy)
    cfg = tiny_run(
        "r",
        steps=2,
        eval={"every": 0},
        games=[{"name": "tic_tac_toe", "restarts": 1.0, "restart_from": "league"}],
    )
    selfplay.train(cfg, console=quiet())
    assert len(added) == 2 and all(added)
    assert all(
        set(seats.values()) != {selfplay.POLICY} for step in added for seats in step
    )  # no self-play match


def test_an_exploring_start_plays_each_legal_move_about_equally_and_records_every_legal_move():
    """`MatchPlan.explore`: the loser's first move at the restart position is drawn uniformly, where the
    policy itself (a tiny untrained network) is far from uniform there; the turn is the LLM's own,
    constrained, with every legal move listed (the learner's softmax runs over all of them)."""
    from agents.llm_agent import LLMAgent, LLMAgentConfig
    from agents.models import tiny_llama
    from agents.transformers_backend import TransformersBackend

    backend = TransformersBackend(
        tiny_llama(0, hidden=32, heads=2, init=1.0)
    )  # large weights: a peaked policy
    agent = LLMAgent(
        "p",
        backend,
        LLMAgentConfig(
            constrained=True, prompt="state", temperature=1.0, max_new_tokens=4, max_retries=0
        ),
    )
    start = (0, 4, 8)  # X, O, X: O (player_1) to move, six empty cells

    def first_moves(explore: bool) -> list:
        plans = [
            MatchPlan(f"e{i}", "tic_tac_toe", ["p", "p"], seed=i, start=start, explore=explore)
            for i in range(120)
        ]
        turns = [r.turns[len(start)] for r in play(plans, {"p": agent}, concurrency=60)]
        assert all(
            t.agent == "p" and t.player == "player_1" and t.constrained and len(t.legal_moves) == 6
            for t in turns
        )
        assert all(
            t.explored == explore for t in turns
        )  # the record says which moves were drawn, not sampled
        return [t.action for t in turns]

    explored, sampled = first_moves(True), first_moves(False)
    assert (
        set(explored) == {1, 2, 3, 5, 6, 7} and max(explored.count(a) for a in set(explored)) <= 35
    )  # 20 expected each
    assert max(sampled.count(a) for a in set(sampled)) > 35
