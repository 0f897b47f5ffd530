"""Full-width self-play (training.full_width): Magnetic Mirror Descent's target from exact move
values over a game's whole tree, fitted by the learner."""

import json
import math

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python import policy as os_policy

from agents import make_agent
from agents.models import tiny_llama
from evaluation.exploitability import exploitability
from training.full_width import PositionTree, RegretTable, action_values, mmd_target
from training.learner import Learner
from training.learner_config import LearnerConfig
from training.selfplay import parse_config, train
from training.sequences import TrainingSequence

PASS, BET = 0, 1


def test_mmd_target_matches_a_hand_computation():
    """pi = (0.5, 0.5), magnet (0.8, 0.2), q = (0, 1), eta 1, alpha 0.5: the update is
    proportional to exp((log pi + 0.5 log rho + q) / 1.5), so p1 / p0 = exp((0.5 ln 0.25 + 1) / 1.5)
    = exp(0.20457) = 1.22700 and p = (0.44903, 0.55097); an illegal third move gets 0."""
    logp = np.log([[0.5, 0.5, 1.0]])
    log_magnet = np.log([[0.8, 0.2, 1.0]])
    q = np.array([[0.0, 1.0, 5.0]])
    legal = np.array([[True, True, False]])
    target = mmd_target(logp, log_magnet, q, legal, eta=1.0, alpha=0.5)
    assert target[0] == pytest.approx([0.44903, 0.55097, 0.0], abs=1e-5)


def test_mmd_target_is_still_where_the_moves_pay_the_same_and_the_magnet_is_the_policy():
    """q equal on the legal moves and rho = pi: the target is pi itself (a fixed point); with
    alpha 0 it is exponential weights, pi x exp(eta q) normalised."""
    pi = np.array([[0.7, 0.2, 0.1]])
    legal = np.ones_like(pi, dtype=bool)
    same = mmd_target(np.log(pi), np.log(pi), np.full_like(pi, 3.0), legal, eta=2.0, alpha=0.3)
    assert same == pytest.approx(pi, abs=1e-12)
    q = np.array([[1.0, 0.0, -1.0]])
    hedge = mmd_target(np.log(pi), np.log(pi), q, legal, eta=0.5, alpha=0.0)
    w = pi * np.exp(0.5 * q)
    assert hedge == pytest.approx(w / w.sum(), abs=1e-12)


def test_the_uniform_magnet_flattens_the_step():
    """epsilon 1, eta 1, alpha 0, q = 0: the target is proportional to exp(log pi / 2) = sqrt(pi):
    pi = (0.8, 0.2) -> sqrt = (0.894, 0.447) -> (2/3, 1/3); with q = (0, 1) the better move gains
    by exp(1 / 2): (0.8^0.5, 0.2^0.5 e^0.5) normalised = (0.5481, 0.4519)."""
    logp = np.log([[0.8, 0.2]])
    legal = np.ones((1, 2), dtype=bool)
    flat = mmd_target(logp, logp, np.zeros((1, 2)), legal, eta=1.0, alpha=0.0, epsilon=1.0)
    assert flat[0] == pytest.approx([2 / 3, 1 / 3], abs=1e-9)
    paid = mmd_target(logp, logp, np.array([[0.0, 1.0]]), legal, eta=1.0, alpha=0.0, epsilon=1.0)
    assert paid[0] == pytest.approx([0.5481, 0.4519], abs=1e-4)


def test_action_values_of_kuhn_under_the_uniform_policy_match_a_hand_computation():
    """Both seats uniform. Holding J first to act: a pass meets a pass (showdown, -1) or a bet
    (then fold -1 or call -2: -1.5), so q(pass) = -1.25; a bet is called (-2) or folded to (+1):
    q(bet) = -0.5. Holding K: q(pass) = 0.5 x 1 + 0.5 x (0.5 x -1 + 0.5 x 2) = 0.75, q(bet) = 1.5."""
    game = pyspiel.load_game("kuhn_poker")
    pol = os_policy.TabularPolicy(game)
    q = action_values(game, pol)
    jack, king = pol.state_lookup["0"], pol.state_lookup["2"]
    assert q[jack] == pytest.approx([-1.25, -0.5])
    assert q[king] == pytest.approx([0.75, 1.5])


def test_moves_of_unequal_token_counts_get_the_cross_entropy_gradient():
    """The learner step on full width's sequences (advantage = target x token count under the
    default seq_mean_token_mean) moves the policy as the cross-entropy to the target does: after
    one plain-SGD-sized step the logits' change points along target - pi, whatever the number
    of tokens each move takes."""
    model, tok = tiny_llama(0)
    prompt = tok("Pick one.", add_special_tokens=False)["input_ids"]
    moves = ["Pass", "Bet on it"]  # one token and several
    seqs = [
        TrainingSequence(
            prompt,
            tok(m, add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
            0.0,
            None,
            moves,
        )
        for m in moves
    ]
    learner = Learner(model, tok, LearnerConfig(lr=1e-3, precision="float32"))
    before = [math.exp(sum(lp)) for lp in learner.logprobs(seqs)]
    assert sum(before) == pytest.approx(1.0, abs=1e-5)
    target = [0.9, 0.1]
    for s, p in zip(seqs, target):
        s.advantage = p * len(s.completion_ids)
    for _ in range(20):
        learner.step(seqs)
    after = [math.exp(sum(lp)) for lp in learner.logprobs(seqs)]
    assert sum(after) == pytest.approx(1.0, abs=1e-5)
    assert abs(after[0] - target[0]) < abs(before[0] - target[0]) / 2


def full_width_config(run, **extra):
    d = {
        "model": "tiny-llama:hidden=64:heads=4",
        "seed": 1,
        "steps": 40,
        "run_dir": str(run),
        "threads": 1,
        "games": ["kuhn_poker"],
        "agent": {
            "prompt": "state",
            "system_prompt": "Kuhn poker.",
            "constrained": True,
            "temperature": 1.0,
        },
        "learner": {"lr": 1e-3},
        "full_width": {
            "enabled": True,
            "eta": 1.0,
            "magnet_coef": 0.2,
            "magnet_every": 10,
            "fit_steps": 10,
        },
        "eval": {
            "every": 20,
            "games": 0,
            "opponents": [],
            "keep_best": False,
            "exploitability": True,
        },
        "checkpoint_every": 20,
    }
    for k, v in extra.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return parse_config(d)


@pytest.mark.slow
def test_full_width_self_play_drives_kuhn_exploitability_down(tmp_path):
    """40 full-width steps on Kuhn poker from a random network: the exploitability `arena eval`
    scores on the saved policy falls from near uniform's 0.4583 to under 0.1 (the method converges
    towards a Nash equilibrium; plain sampled self-play stays at 0.33 here: docs/results/kuhn.md),
    and every step logs the exact exploitability of the policy it started from."""
    run = tmp_path / "fw"
    train(full_width_config(run))
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 40 and all(m["games"] == 0 for m in metrics)
    assert metrics[0]["exploitability"] > 0.3
    gaps = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert gaps[0]["exploitability"] > 0.3
    scored = exploitability(make_agent(f"llm:{run}"), "kuhn_poker")
    assert scored.exploitability == pytest.approx(gaps[-1]["exploitability"], abs=1e-5)
    assert scored.exploitability < 0.1


@pytest.mark.parametrize(
    "fw",
    [
        pytest.param({"magnet_every": 2, "minibatches": 1}, marks=pytest.mark.slow),
        {"magnet_every": 2, "minibatches": 3},
        {"target": "cfr_plus", "cfr_iterations": 2, "minibatches": 3},
    ],
)
def test_a_resumed_full_width_run_ends_where_the_unbroken_one_does(tmp_path, fw):
    """The magnet (or CFR+'s sums) and the last targets live in the checkpoint, and the split into
    minibatches is drawn from the seed and the step: 6 steps in one go and 3 + 3 with a resume end
    with the same weights and log the same exploitability at every step."""
    one = full_width_config(tmp_path / "one", steps=6, checkpoint_every=3, full_width=fw)
    train(one)
    two = full_width_config(tmp_path / "two", steps=3, checkpoint_every=3, full_width=fw)
    train(two)
    two = full_width_config(tmp_path / "two", steps=6, checkpoint_every=3, full_width=fw)
    train(two, resume=True)
    read = lambda run: [
        json.loads(x)["exploitability"] for x in (run / "metrics.jsonl").read_text().splitlines()
    ]  # noqa: E731
    assert read(tmp_path / "one") == read(tmp_path / "two")
    from safetensors.torch import load_file

    def weights(run):
        folder = sorted((run / "checkpoints").glob("step_*"))[-1]
        return load_file(next(folder.glob("*.safetensors")))

    wa, wb = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"games": ["prisoners_dilemma"]}, "full_width needs OpenSpiel games"),
        ({"agent": {"constrained": False}}, "full_width needs agent.constrained"),
        ({"league": {"self_play": 0.5, "bots": ["random"]}}, "full_width is pure self-play"),
        ({"learner": {"loss": {"entropy_coef": 0.1}}}, "set learner.loss.entropy_coef to 0"),
        ({"epochs": 2}, "set full_width.fit_steps instead"),
        ({"full_width": {"max_states": 10}}, "kuhn_poker has more than 10 information states"),
        ({"full_width": {"eta": 0.0}}, "full_width.eta must be > 0, got 0.0"),
        ({"full_width": {"key": "board"}}, "key must be one of info_state, position, got 'board'"),
        ({"full_width": {"minibatches": 0}}, "minibatches must be >= 1, got 0"),
        (
            {"full_width": {"target": "cfr_plus", "key": "position"}},
            "full_width.target cfr_plus needs key: info_state",
        ),
        ({"full_width": {"target": "cfr"}}, "target must be one of mmd, cfr_plus, got 'cfr'"),
        (
            {"full_width": {"key": "position"}},
            "key: position needs a sequential, deterministic, perfect-information game; kuhn_poker",
        ),
    ],
)
def test_configs_full_width_cannot_serve_are_refused(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        full_width_config(tmp_path / "r", **extra)


def _history_values(state, pi_of, player_br=None):
    """Expected returns from `state` by plain recursion over move histories (no table of
    positions): every player samples `pi_of(state)`, except `player_br`, who takes its best move."""
    if state.is_terminal():
        return np.array(state.returns())
    results = {a: _history_values(state.child(a), pi_of, player_br) for a in state.legal_actions()}
    if state.current_player() == player_br:
        return max(results.values(), key=lambda r: r[player_br])
    probs = pi_of(state)
    return sum(probs[a] * r for a, r in results.items())


def _tic_tac_toe_after(moves):
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for a in moves:
        state.apply_action(a)
    return state


def test_position_tree_has_tic_tac_toes_positions_and_random_plays_value():
    """Tic-tac-toe has 4,520 non-terminal positions (549,946 move histories); under uniformly
    random play X wins 58.49% and O 28.81% of games, so each move's values at the start average
    to X's expected return 0.2968."""
    tree = PositionTree(pyspiel.load_game("tic_tac_toe"), 5000)
    assert len(tree.states) == 4520
    uniform = tree.legal / tree.legal.sum(axis=1, keepdims=True)
    q = tree.action_values(uniform)
    assert q[0].sum() / 9 == pytest.approx(0.5849 - 0.2881, abs=1e-3)
    assert tree.start_values(uniform) == pytest.approx([0.2968, -0.2968], abs=1e-3)


def test_position_values_and_nash_conv_match_a_walk_over_move_histories():
    """A random position-keyed policy: the tree's move values at a mid-game position, and the
    gain of each player's best response, equal a plain recursion over every move history."""
    tree = PositionTree(pyspiel.load_game("tic_tac_toe"), 5000)
    rng = np.random.default_rng(3)
    pi = np.where(tree.legal, rng.random(tree.legal.shape), 0.0)
    pi /= pi.sum(axis=1, keepdims=True)
    rows = {(s.current_player(), str(s)): r for r, s in enumerate(tree.states)}
    pi_of = lambda s: pi[rows[(s.current_player(), str(s))]]  # noqa: E731
    mid = _tic_tac_toe_after([4, 0, 8])  # O to move
    q = tree.action_values(pi)[rows[(1, str(mid))]]
    for a in mid.legal_actions():
        assert q[a] == pytest.approx(_history_values(mid.child(a), pi_of)[1], abs=1e-12)
    start = tree.states[0]
    on_policy = _history_values(start, pi_of)
    gain = sum(_history_values(start, pi_of, p)[p] - on_policy[p] for p in (0, 1))
    assert tree.nash_conv(pi) == pytest.approx(gain, abs=1e-12)


def test_blunders_count_the_positions_whose_likeliest_move_loses_value():
    """The solver's policy (uniform over each position's best moves) has no blunder and zero
    NashConv; moving all its mass at one position where O must block onto a corner that does
    not block makes one blunder, with mass 1 / 4520."""
    tree = PositionTree(pyspiel.load_game("tic_tac_toe"), 5000)
    best = np.where(tree.legal, tree.solved, -np.inf)
    perfect = (best == best.max(axis=1, keepdims=True)).astype(float)
    perfect /= perfect.sum(axis=1, keepdims=True)
    assert tree.blunders(perfect) == (0, 0.0)
    assert tree.nash_conv(perfect) == pytest.approx(0.0, abs=1e-12)
    row = next(
        r for r, s in enumerate(tree.states) if str(s) == str(_tic_tac_toe_after([0, 4, 1]))
    )  # X holds cells 0 and 1: O must take 2
    assert tree.solved[row, 2] == 0.0 and tree.solved[row, 6] == -1.0
    bad = perfect.copy()
    bad[row] = 0.0
    bad[row, 6] = 1.0
    assert tree.blunders(bad) == (1, pytest.approx(1 / 4520))


@pytest.mark.slow
def test_a_position_keyed_tic_tac_toe_run_logs_blunders_over_every_position(tmp_path):
    """full_width.key position on tic-tac-toe: one row per position (4,520, not the 294,778
    information states), split into minibatches; each step logs the exact exploitability and
    the count of positions whose likeliest move loses value."""
    cfg = full_width_config(
        tmp_path / "ttt",
        steps=2,
        games=[{"name": "tic_tac_toe", "params": {"board": "relative"}}],
        agent={"system_prompt": "Tic-tac-toe."},
        learner={"lr_schedule": "cosine"},
        full_width={"key": "position", "fit_steps": 1, "minibatches": 3},
        eval={"every": 0, "exploitability": False},
    )
    assert cfg.learner.total_steps == 2 * 3  # the cosine runs over every minibatch's step
    train(cfg)
    metrics = [
        json.loads(line) for line in (tmp_path / "ttt" / "metrics.jsonl").read_text().splitlines()
    ]
    for m in metrics:
        assert 0 < m["blunders"] <= 4520 and 0 < m["exploitability"] <= 1


def _cfr_plus_by_hand(game, iterations: int) -> dict[str, np.ndarray]:
    """CFR+ written out independently: regret matching+ with alternating updates (each player's
    pass against the policy the passes before it left) and linearly weighted averages, by
    recursion over the histories; information state -> average policy."""
    regret, avg, current = {}, {}, {}  # the current policy changes after each player's pass

    def walk(state, player, reach, t):
        if state.is_terminal():
            return np.array(state.returns())
        if state.is_chance_node():
            return sum(
                p * walk(state.child(a), player, reach, t) for a, p in state.chance_outcomes()
            )
        who, key, legal = (
            state.current_player(),
            state.information_state_string(),
            state.legal_actions(),
        )
        r = regret.setdefault(key, np.zeros(len(legal)))
        pi = current.get(key, np.full(len(legal), 1 / len(legal)))
        values = []
        for a, p in zip(legal, pi):
            nxt = reach.copy()
            nxt[who] *= p
            values.append(walk(state.child(a), player, nxt, t))
        value = sum(p * v for p, v in zip(pi, values))
        if who == player:
            others = np.prod(np.delete(reach, who))
            r += others * (np.array([v[who] for v in values]) - value[who])
            avg[key] = avg.get(key, 0) + t * reach[who] * pi
        return value

    for t in range(1, iterations + 1):
        for player in range(game.num_players()):
            walk(game.new_initial_state(), player, np.ones(game.num_players() + 1), t)
            for key, r in regret.items():
                np.maximum(r, 0, out=r)
                current[key] = r / r.sum() if r.sum() > 0 else np.full(len(r), 1 / len(r))
    return {k: v / v.sum() for k, v in avg.items()}


def test_regret_table_is_cfr_plus_and_resumes_from_its_saved_sums():
    """`RegretTable` (target: cfr_plus) on 3-player Kuhn: its average policy after 5 iterations is
    the one a CFR+ written out by hand gives, row by row; 2 iterations saved through JSON and
    3 more after a restore give the same table exactly; and 100 iterations bring the average
    below NashConv 0.01 (uniform: 2.0625)."""
    from open_spiel.python.algorithms.exploitability import nash_conv

    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    table = os_policy.TabularPolicy(game)
    one = RegretTable(game, table)
    one.iterate(5)
    expected = _cfr_plus_by_hand(game, 5)
    got = one.average()
    for key, row in table.state_lookup.items():
        legal = np.flatnonzero(table.legal_actions_mask[row])
        np.testing.assert_allclose(got[row, legal], expected[key], atol=1e-12)
    two = RegretTable(game, table)
    two.iterate(2)
    three = RegretTable(game, table)
    three.restore(json.loads(json.dumps(two.saved())))
    three.iterate(3)
    assert three.iterations == 5 and np.array_equal(three.average(), got)
    one.iterate(95)
    table.action_probability_array[:] = one.average()
    assert nash_conv(game, table) < 0.01
