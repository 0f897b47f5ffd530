"""The match runner and `arena play` with bots: reproducibility, forfeits, records, CLI errors."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents import make_agent
from agents.base import decision
from arena.runner import OPENING, MatchPlan, plan_matches, play
from arena.summary import summarize
from cli.main import main as arena_main
from core.records import read_jsonl


def _run(concurrency, seed=0, n=12, game="tic_tac_toe", specs=("random", "mcts:10")):
    agents = {s: make_agent(s) for s in specs}
    plans = plan_matches(game, list(specs), n, seed=seed)
    return list(play(plans, agents, concurrency=concurrency))


def _moves(records):
    return {r.match_id: [(t.player, t.action) for t in r.turns] for r in records}


def test_seeds_reproduce_a_run_exactly_whatever_the_concurrency():
    a, b, c = _run(4), _run(4), _run(1)
    assert _moves(a) == _moves(b) == _moves(c)
    assert {r.match_id: r.returns for r in a} == {r.match_id: r.returns for r in c}
    d = _run(4, seed=1)
    assert _moves(d) != _moves(a)


class RowCounter:
    """Wraps an agent and records how many turns each `act` call carried."""

    def __init__(self, agent):
        self.agent, self.name, self.rows = agent, agent.name, []

    def act(self, turns):
        self.rows.append(len(turns))
        return self.agent.act(turns)


def _self_play(concurrency, n=30, opening=0):
    counter = RowCounter(make_agent("random"))
    plans = [
        MatchPlan(f"s{i:02d}", "tic_tac_toe", ["me", "me"], seed=i, opening=opening)
        for i in range(n)
    ]
    return list(play(plans, {"me": counter}, concurrency=concurrency)), counter.rows


def test_a_freed_slot_is_refilled_in_the_same_pass_so_batches_stay_full():
    records, rows = _self_play(concurrency=4)
    assert sorted(r.match_id for r in records) == [f"s{i:02d}" for i in range(30)]
    assert sum(rows) == sum(len(r.turns) for r in records)
    assert (
        len({len(r.turns) for r in records}) > 1
    )  # matches end on different steps, so slots free mid-run
    tail = next(
        i for i, r in enumerate(rows) if r < 4
    )  # the first short call: the queue has run dry
    assert rows[:tail] == [4] * tail and tail >= 30 * 5 // 4 - 4
    assert (
        rows[tail:] == sorted(rows[tail:], reverse=True) and len(rows) - tail <= 9
    )  # the tail only shrinks, within one match length
    solo, solo_rows = _self_play(concurrency=1)
    assert set(solo_rows) == {1} and _moves(solo) == _moves(records)
    # matches whose random opening can leave few turns still refill within the pass
    _, opened_rows = _self_play(concurrency=4, opening=4)
    short = next(i for i, r in enumerate(opened_rows) if r < 4)
    assert opened_rows[:short] == [4] * short


def test_a_sampling_tiny_llama_plays_the_same_records_through_a_queue_as_one_at_a_time():
    from agents.llm_agent import LLMAgent, LLMAgentConfig
    from agents.models import tiny_llama
    from agents.transformers_backend import TransformersBackend

    backend = TransformersBackend(tiny_llama(0))
    cfg = LLMAgentConfig(constrained=True, max_new_tokens=8, temperature=1.0, seed=5)

    def records(concurrency):
        agents = {"llm": LLMAgent("llm", backend, cfg), "bot": make_agent("random")}
        plans = plan_matches("tic_tac_toe", ["llm", "bot"], 7, seed=11)
        plans += [
            MatchPlan(f"self{i}", "tic_tac_toe", ["llm", "llm"], seed=40 + i) for i in range(3)
        ]
        return {
            r.match_id: ([(t.player, t.action, t.token_ids) for t in r.turns], r.outcome)
            for r in play(plans, agents, concurrency=concurrency)
        }

    queued, alone = records(3), records(1)
    assert queued == alone
    assert (
        len({tuple(a for _, a, _ in moves) for moves, _ in queued.values()}) > 1
    )  # it samples: matches differ


def test_seats_alternate_and_returns_match_turn_rewards():
    records = _run(8, n=10)
    firsts = [r.seats["player_0"] for r in sorted(records, key=lambda r: r.match_id)]
    assert firsts.count("random") == firsts.count("mcts:10") == 5
    for r in records:
        for p in r.seats:
            assert sum(t.reward for t in r.turns if t.player == p) == pytest.approx(r.returns[p])
        assert sorted(r.returns.values()) in ([-1.0, 1.0], [0.0, 0.0])


def test_a_game_whose_params_change_its_seats_is_planned_with_that_many(tmp_path):
    plans = plan_matches("commons", ["a", "b", "c"], 3, params={"num_players": 3})
    assert [p.seats for p in plans] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    out = tmp_path / "m.jsonl"
    arena_main(
        [
            "play",
            "public_goods",
            "--param",
            "num_players=3",
            "--agents",
            "random",
            "always_defect",
            "tit_for_tat",
            "--matches",
            "3",
            "--out",
            str(out),
        ]
    )
    assert [len(r.seats) for r in read_jsonl(out)] == [3, 3, 3]


def test_a_random_opening_plays_0_to_k_legal_moves_the_same_for_both_seat_orders():
    agents = {s: make_agent(s) for s in ("random", "mcts:10")}
    plans = []
    for seed in range(40):
        plans += [
            MatchPlan(f"a{seed}", "tic_tac_toe", ["random", "mcts:10"], seed, opening=3),
            MatchPlan(f"b{seed}", "tic_tac_toe", ["mcts:10", "random"], seed, opening=3),
        ]
    records = {r.match_id: r for r in play(plans, agents, concurrency=16)}
    lengths = []
    for seed in range(40):
        a, b = records[f"a{seed}"], records[f"b{seed}"]
        opening = [(t.player, t.action) for t in a.turns if t.agent == OPENING]
        assert opening == [(t.player, t.action) for t in b.turns if t.agent == OPENING]
        assert [
            (t.player, t.action) for t in a.turns[: len(opening)]
        ] == opening  # the first moves, then the agents
        assert all(t.agent != OPENING for t in a.turns[len(opening) :])
        assert len({m for _, m in opening}) == len(opening)  # legal: no cell taken twice
        lengths.append(len(opening))
    assert set(lengths) == {0, 1, 2, 3}
    rows = {s.agent: s for s in summarize(list(records.values()))}
    assert set(rows) == {"random", "mcts:10"} and rows["random"].games == 80
    (plain,) = play([MatchPlan("c", "tic_tac_toe", ["random", "mcts:10"], 5)], agents)
    assert all(t.agent != OPENING for t in plain.turns)
    # an opening longer than the game never decides it: a player always makes the last move
    long = list(
        play(
            [
                MatchPlan(f"l{seed}", "tic_tac_toe", ["random", "mcts:10"], seed, opening=100)
                for seed in range(20)
            ],
            agents,
        )
    )
    assert all(r.turns[-1].agent != OPENING for r in long)
    assert max(sum(t.agent == OPENING for t in r.turns) for r in long) >= 5


class Forfeiter:
    """Forfeits its first decision (as an LLM agent whose fallback policy is forfeit)."""

    name = "forfeiter"

    def act(self, turns):
        return [
            decision(t, self.name, None, move="", valid=False, fallback="forfeit") for t in turns
        ]


def test_forfeit_ends_the_match_with_the_offender_penalised():
    agents = {"forfeiter": Forfeiter(), "random": make_agent("random")}
    plans = [MatchPlan("f0", "tic_tac_toe", ["forfeiter", "random"], 0)]
    (rec,) = play(plans, agents)
    assert len(rec.turns) == 1 and rec.turns[0].fallback == "forfeit"
    assert rec.returns == {"player_0": -1.0, "player_1": 0.0}
    assert rec.outcome == {"player_0": "loss", "player_1": "win"}


def test_cfr_beats_random_at_kuhn_poker():
    records = _run(16, n=2000, game="kuhn_poker", specs=("cfr", "random"))
    cfr = sum(r.returns[p] for r in records for p, a in r.seats.items() if a == "cfr")
    # exact expectation of this policy against uniform random: 0.145 a hand (0.124 as
    # player_0, 0.167 as player_1); the standard error over 2000 hands is 0.03
    assert cfr / len(records) > 0.07


def test_minimax_takes_a_win_at_depth_1_blocks_at_depth_2_and_never_loses_at_full_depth():
    import pyspiel

    from agents.bots import MinimaxAgent

    game = pyspiel.load_game("tic_tac_toe")
    win = game.new_initial_state()
    for a in (0, 3, 1, 4):  # x: 0 1, o: 3 4; x to move wins at 2
        win.apply_action(a)
    assert MinimaxAgent(depth=1).best_actions(win) == [2]
    block = game.new_initial_state()
    for a in (0, 4, 1):  # x: 0 1, o: 4; o to move must block at 2
        block.apply_action(a)
    assert (
        MinimaxAgent(depth=1).best_actions(block) == block.legal_actions()
    )  # sees no win: all equal
    assert MinimaxAgent(depth=2).best_actions(block) == [2]
    records = _run(8, n=60, specs=("minimax", "random"))
    assert all(r.returns[p] >= 0 for r in records for p, a in r.seats.items() if a == "minimax")
    assert (
        sum(r.outcome[p] == "win" for r in records for p, a in r.seats.items() if a == "minimax")
        >= 45
    )
    assert all(
        sorted(r.returns.values()) == [0.0, 0.0]
        for r in _run(8, n=10, specs=("minimax", "minimax:9"))
    )
    with pytest.raises(ValueError, match="zero-sum deterministic perfect-information"):
        _run(1, n=1, game="kuhn_poker", specs=("minimax", "random"))
    with pytest.raises(
        ValueError, match="connect_four lasts up to 42 plies.*minimax:5"
    ):  # would never finish
        _run(1, n=1, game="connect_four", specs=("minimax", "random"))
    assert len(_run(1, n=1, game="connect_four", specs=("minimax:2", "random"))) == 1
    # one agent, two games: the empty boards share a history string but not their moves
    agent = MinimaxAgent(depth=1)
    assert agent.best_actions(game.new_initial_state()) == list(range(9))
    assert agent.best_actions(pyspiel.load_game("connect_four").new_initial_state()) == list(
        range(7)
    )


def test_arena_play_writes_jsonl_that_reads_back(tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    assert (
        arena_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                "random",
                "random",
                "--matches",
                "6",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    records = list(read_jsonl(out))
    assert len(records) == 6 and len({r.match_id for r in records}) == 6
    assert set(records[0].seats.values()) == {"random", "random#2"}
    assert json.loads(out.read_text().splitlines()[0])["schema_version"] == 1
    assert "random#2" in capsys.readouterr().out
    opened = tmp_path / "opened.jsonl"
    assert (
        arena_main(
            [
                "play",
                "tic_tac_toe",
                "--agents",
                "random",
                "random",
                "--matches",
                "20",
                "--opening",
                "2",
                "--out",
                str(opened),
            ]
        )
        == 0
    )
    assert any(t.agent == OPENING for r in read_jsonl(opened) for t in r.turns)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["play", "tic_tac_to", "--agents", "random", "random"], "did you mean tic_tac_toe"),
        (["play", "tic_tac_toe", "--agents", "random", "nobody"], "unknown agent 'nobody'"),
        (
            ["play", "tic_tac_toe", "--agents", "random", "mtcs:10"],
            "unknown agent 'mtcs'; did you mean mcts? (known: random, mcts",
        ),
        (
            ["play", "tic_tac_toe", "--agents", "random", "mtcs"],
            "unknown agent 'mtcs'; did you mean mcts? (known: random, mcts",
        ),
        (["games", "show", "chess_960_x"], "unknown game"),
        (["games", "show", "kuhn"], "unknown game 'kuhn'; did you mean kuhn_poker?"),
        (
            ["play", "tic_tac_toe", "--agents", "random", "random", "--opening", "-2"],
            "--opening must be >= 0",
        ),
        (
            ["play", "tic_tac_toe", "--agents", "random", "random", "--concurrency", "0"],
            "--concurrency must be >= 1, got 0",
        ),
        (
            ["play", "tic_tac_toe", "--agents", "random", "random", "--matches", "-3"],
            "--matches must be >= 1, got -3",
        ),
        (
            ["play", "tic_tac_toe", "--agents", "random", "random", "--out", "/tmp"],
            "/tmp is a folder; give the trajectory file's path",
        ),
    ],
)
def test_bad_input_is_one_clear_line(argv, message):
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_runner_refuses_counts_below_one():
    def hung(*_):
        raise TimeoutError("play(concurrency=0) spun without ever starting a match")

    agents = {"random": make_agent("random")}
    signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        with pytest.raises(ValueError, match="concurrency must be >= 1"):
            next(play([MatchPlan("a", "tic_tac_toe", ["random", "random"])], agents, concurrency=0))
    finally:
        signal.alarm(0)
    with pytest.raises(ValueError, match="number of matches must be >= 1, got -3"):
        plan_matches("tic_tac_toe", ["random"], -3)


def test_trajectories_into_a_read_only_folder_fail_before_any_match(tmp_path, make_read_only):
    make_read_only(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "play",
            "tic_tac_toe",
            "--agents",
            "random",
            "random",
            "--out",
            str(tmp_path / "run.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = (
        proc.stderr.strip().splitlines()
    )  # refused before the first match: no progress bar, no traceback
    assert line.startswith(f"arena play: error: cannot write to {tmp_path} ("), line


def test_a_human_whose_input_ends_forfeits_and_it_is_recorded(tmp_path):
    out = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "play",
            "tic_tac_toe",
            "--agents",
            "human",
            "random",
            "--matches",
            "2",
            "--out",
            str(out),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        proc.stderr.count(
            "human: end of input (stdin closed): forfeiting this and every later turn"
        )
        == 1
    )
    records = list(read_jsonl(out))
    assert len(records) == 2
    for r in records:  # the human's first turn is a forfeit: a loss, recorded like an LLM's
        (turn,) = [t for t in r.turns if t.agent == "human"]
        assert (turn.action, turn.valid, turn.fallback) == (
            None,
            False,
            "forfeit",
        ) and turn.attempts[0].error.startswith("eof")
        human = next(p for p, name in r.seats.items() if name == "human")
        assert r.outcome[human] == "loss"


def test_torn_last_line_of_a_killed_writer_is_skipped(tmp_path):
    out = tmp_path / "run.jsonl"
    arena_main(
        ["play", "tic_tac_toe", "--agents", "random", "random", "--matches", "3", "--out", str(out)]
    )
    with open(out, "a") as f:
        f.write('{"schema_version": 1, "match_id": "half')
    assert len(list(read_jsonl(out))) == 3


def test_agent_specs_take_options_and_reject_bad_ones():
    assert make_agent("minimax:2").depth == 2 and make_agent("minimax").depth is None
    assert (
        make_agent("mcts:7,rollouts=2").simulations == 7
        and make_agent("mcts:7,rollouts=2").rollouts == 2
    )
    llm = make_agent("llm:tiny-llama,fallback=random,max_retries=0,temperature=0.0")
    assert (llm.config.fallback, llm.config.max_retries, llm.config.temperature) == (
        "random",
        0,
        0.0,
    )
    for bad, says in [
        ("mcts:many", "whole number"),
        ("random:3", "no ':' argument"),
        ("mcts,depth", "key=value"),
        ("mcts,depth=3", "depth"),
        ("minimax:0", "at least 1"),
        ("llm:tiny-llama,colour=red", "unknown option"),
        ("wizard", "unknown agent"),
    ]:
        with pytest.raises(ValueError, match=says):
            make_agent(bad)


def test_piped_tables_fit_in_100_columns(tmp_path):
    """`arena games`, an evaluation's report and a leaderboard, piped: no table line over 100
    characters (a plain line, such as the one naming the store, stays whole)."""
    tour = tmp_path / "t.yaml"
    tour.write_text(
        "name: narrow\nformat: round_robin\nplayers: {random: random, mcts-5: mcts:5}\n"
        "games: [tic_tac_toe]\ngames_per_pairing: 2\n"
    )
    commands = [
        ["games"],
        ["eval", "--agent", "random", "--baseline", "mcts:5", "--games", "tic_tac_toe"]
        + ["connect_four", "--opponents", "random", "--matches", "2", "--out", str(tmp_path / "e")],
        ["tournament", str(tour), "--db", str(tmp_path / "t.db")],
    ]
    plain = ("evaluating ", "results: ", "tournament 'narrow'", "report: ")
    for argv in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert proc.returncode == 0, proc.stderr
        wide = [line for line in proc.stdout.splitlines() if len(line) > 100]
        assert all(line.startswith(plain) for line in wide), (argv[0], wide)
        assert proc.stdout.count("\n") > 10


class Resigns:
    """Ends every match it moves in at once (no move: the env's illegal-move rule)."""

    name = "resigns"

    def act(self, turns):
        return [decision(t, self.name, None, move="", valid=False) for t in turns]


class BrokenBackend:
    """A custom backend that fails on its first call."""

    def generate(self, conversations, params, allowed=None):
        raise ConnectionError("model server went away\nsecond line of its traceback")


def test_a_failing_backend_keeps_the_finished_matches_and_fails_in_one_line(tmp_path):
    """In the pass where a backend raises, the matches that other agents ended before it are
    written and yielded, then one error names the agent and its backend."""
    from agents.llm_agent import LLMAgent
    from arena.runner import AgentFailed

    agents = {
        "resigns": Resigns(),
        "random": make_agent("random"),
        "llm": LLMAgent("llm", BrokenBackend()),
    }
    plans = [
        MatchPlan("ended", "tic_tac_toe", ["resigns", "random"], seed=1),
        MatchPlan("in flight", "tic_tac_toe", ["llm", "random"], seed=2),
    ]
    out = tmp_path / "m.jsonl"
    got = []
    with pytest.raises(AgentFailed) as e:
        for rec in play(plans, agents, concurrency=4, out=str(out)):
            got.append(rec.match_id)
    assert got == ["ended"] and [r.match_id for r in read_jsonl(out)] == ["ended"]
    assert str(e.value) == (
        "agent 'llm' (BrokenBackend) failed: ConnectionError: model server went away"
    )


def test_agent_failed_survives_pickling():
    """It crosses process boundaries (Ray workers) intact."""
    import pickle

    from arena.runner import AgentFailed

    e = AgentFailed.of("llm", Resigns(), KeyError("x"))
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) == "agent 'llm' (Resigns) failed: KeyError: 'x'"
    assert back.agent == "llm" and back.matches_kept


def test_a_checkpoint_warned_of_other_params_but_not_of_the_blanked_messages_twin():
    """A trained agent playing Trust-and-Split with the params it trained on plus the evaluation
    control `blank_messages` gets no warning; with another number of rounds it gets one line."""
    from arena.runner import untrained_params_warnings

    class Trained:
        trained_games = [("trust_and_split", {"rounds": 3, "messages": "free"})]

    def plan(params):
        return MatchPlan("m", "trust_and_split", ["t", "t"], params=params)

    agents = {"t": Trained()}
    same = {"rounds": 3, "messages": "free"}
    assert untrained_params_warnings([plan({**same, "blank_messages": True})], agents) == []
    [line] = untrained_params_warnings([plan({**same, "rounds": 2})], agents)
    assert (
        line.startswith("warning: t trained on trust_and_split with params")
        and "'rounds': 2" in line
    )
