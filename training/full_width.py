"""Full-width self-play: Magnetic Mirror Descent over every information state of a small game.

Sampled self-play estimates each move's value from the matches a step happens to play; on a
game whose tree fits in memory (Kuhn poker's 12 information states, Leduc's 936) the values
can be computed exactly instead. With `full_width.enabled` a training step plays no matches:

    for every information state I of the game (both seats: the policy plays both)
        pi(.|I)    the policy's exact move distribution: one constrained sequence per legal
                   move through the prompt it sees at I, scored by the learner
    q(I, a)        the expected return of move a at I when both seats play pi, conditioned on
                   reaching I (the counterfactual reach of the other seat and chance; OpenSpiel's
                   `TreeWalkCalculator` walks the tree)
    target(.|I)  ~ exp((log pi + alpha eta log rho + eta q) / (1 + alpha eta))      (`mmd_target`)
    fit            `fit_steps` passes of `minibatches` learner steps each on the cross-entropy
                   -sum_a target(a|I) log pi(a|I) over every I (each move sequence's advantage is its target probability: at
                   ratio 1 the PPO gradient is the cross-entropy's)
    magnet         rho, a table of the policy's distributions, is replaced by the current policy
                   every `magnet_every` steps

That is Magnetic Mirror Descent in behavioural form (Sokota et al., "A Unified Approach to
Reinforcement Learning, Quantal Response Equilibria, and Two-Player Zero-Sum Games", ICLR 2023)
with a moving magnet: each step moves the policy at every information state towards the moves
that pay more against itself, held back by the magnet (the fixed point of a fixed magnet is a
quantal response equilibrium at temperature alpha; moving the magnet to the policy walks that
equilibrium towards a Nash equilibrium). The network represents the table: the learner fits
the target through the very prompts and move strings the policy plays with.

With `full_width.target: cfr_plus` the target is instead CFR+'s average policy over the same
rows (`RegretTable`: OpenSpiel's `CFRPlusSolver`, `cfr_iterations` iterations a step, its
regret and policy sums kept in the run's state): it converges where the moving magnet's last
iterate swings, with any number of players (3-player Kuhn); the values are then the solver's,
not the network's, and the network fits the solver's strategy through its prompts.

Perfect-information games have one information state per move history: tic-tac-toe has
294,778 of them but 4,520 positions. With `full_width.key: position` the table has one row per
position (`PositionTree`: keyed by the player to move and the state's string, the board), the
policy being a function of the position as its prompt is, and q comes from one pass over the
positions, children before parents (`PositionTree.action_values`). Each row is weighed
equally, reached or not: the fit covers every position an opponent could lead to, which is
what perfect play against any opponent asks.

Config (`full_width:`; `FullWidthConfig`): `eta` (step size per unit of return), `magnet_coef`
(alpha), `magnet_every`, `entropy_coef`, `fit_steps`, `minibatches`, `target`, `cfr_iterations`,
`max_states`, `key`. Games: OpenSpiel
games with information-state strings and at most `max_states` of them (`key: position`:
deterministic perfect-information games with at most `max_states` positions); constrained
agent, pure self-play. Metrics per step: `nash_conv` (and `exploitability` for two-player
zero-sum games) of the policy the step started from, exact; `target_kl` (mean KL(target || pi)
over the table's rows: how far the step asks the policy to move); `fit_kl` (the same KL of the
previous step's target against the policy after its fit: what the network failed to follow);
with `target: cfr_plus` also `target_nash_conv` (the NashConv of the step's target; and its
`target_exploitability` in two-player zero-sum games);
with `key: position` in a two-player zero-sum game also `blunders` (positions, of all of them,
whose most likely move lowers the game-theoretic value) and `blunder_mass` (the mean
probability on value-losing moves).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyspiel

import games
from core.typed_config import above, at_least, check_fields, option
from evaluation.exploitability import info_states, turn_at, two_player_zero_sum
from training.sequences import TrainingSequence, render_prompt


@dataclass
class FullWidthConfig:
    """Full-width self-play (`training.full_width`): exact values over a small game's whole tree."""

    enabled: bool = False
    """train on every information state with exact move values instead of sampled matches"""
    eta: float = option(1.0, check=above(0))
    """Magnetic Mirror Descent's step size, per unit of return (scale it down for games with larger payoffs)"""
    magnet_coef: float = option(0.2, check=at_least(0))
    """alpha: the pull towards the magnet (and the temperature of the equilibrium a fixed magnet leads to)"""
    magnet_every: int = option(10, check=at_least(0))
    """replace the magnet with the current policy every N steps; 0: the magnet stays the initial policy"""
    entropy_coef: float = option(0.0, check=at_least(0))
    """epsilon: a second, fixed magnet at the uniform policy (an entropy bonus): it flattens every step's
    target, so a move the policy has written off comes back when it pays (a pretrained model's peaked
    distributions); the fixed point is then a quantal response equilibrium at temperature epsilon"""
    fit_steps: int = option(1, check=at_least(1))
    """passes per training step over the rows, fitting the cross-entropy to the step's target"""
    minibatches: int = option(1, check=at_least(1))
    """learner steps per pass, each on a random share of the rows (a row's moves stay together): more
    updates for the same compute where the table has thousands of rows"""
    max_states: int = option(5000, check=at_least(1))
    """refuse a game with more information states (positions, with key: position) than this"""
    target: str = option("mmd", choices=("mmd", "cfr_plus"))
    """what each step's fit aims at: mmd (Magnetic Mirror Descent's step from the policy, with the magnet) or
    cfr_plus (the average policy of CFR+ run over the table, `cfr_iterations` iterations a step: it converges
    where mmd's moving magnet lands, with any number of players)"""
    cfr_iterations: int = option(1, check=at_least(1))
    """target cfr_plus: CFR+ iterations over the whole tree per training step"""
    key: str = option("info_state", choices=("info_state", "position"))
    """the table's rows: info_state (OpenSpiel's information states) or position (one row per position of a
    deterministic perfect-information game, whatever the moves that led there: tic-tac-toe's 4,520)"""

    def __post_init__(self):
        check_fields(self)
        if self.target == "cfr_plus" and self.key == "position":
            raise ValueError(
                "full_width.target cfr_plus needs key: info_state (CFR+ runs over information states)"
            )


def mmd_target(
    logp: np.ndarray,
    log_magnet: np.ndarray,
    q: np.ndarray,
    legal: np.ndarray,
    eta: float,
    alpha: float,
    epsilon: float = 0.0,
) -> np.ndarray:
    """Magnetic Mirror Descent's update at each information state (negative-entropy mirror map).

    Args:
        logp: (S, A) log-probabilities of the current policy (any value off `legal`).
        log_magnet: (S, A) log-probabilities of the magnet.
        q: (S, A) the value of each move at each state.
        legal: (S, A) bool, the legal moves.
        eta: step size; alpha: magnet weight; epsilon: the weight of a second magnet at the
            uniform policy (its log-probabilities are equal across the legal moves, so it only
            adds to the denominator).

    Returns:
        (S, A) the next policy: proportional to exp((logp + alpha eta log_magnet + eta q) /
        (1 + alpha eta + epsilon eta)) over the legal moves, 0 elsewhere.
    """
    z = (logp + alpha * eta * log_magnet + eta * q) / (1.0 + alpha * eta + epsilon * eta)
    z = np.where(legal, z, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def action_values(game, policy) -> np.ndarray:
    """(S, A) the value of each move at each information state of `policy`, for the seat to move,
    when every seat plays `policy`: the mean over the state's histories weighted by the
    other seats' and chance's reach (0 where that reach is 0)."""
    from open_spiel.python.algorithms.action_value import TreeWalkCalculator

    calc = TreeWalkCalculator(game)
    calc.compute_all_states_action_values([policy] * game.num_players())
    q = np.zeros_like(policy.action_probability_array)
    for (_, key), weighted in calc.info_state_cf_prob_by_q_sum.items():
        reach = calc.info_state_cf_prob[(_, key)]
        if reach > 0:
            q[policy.state_lookup[key]] = weighted / reach
    return q


class PositionTree:
    """Every decision position of a deterministic perfect-information game, one row each.

    A position is keyed by the player to move and the state's string (tic-tac-toe's board), so
    the move histories that lead to one board share its row. `children[r, a]` is the row the
    move leads to, or -1 where it ends the game (`returns[r, a]` then holds the result) or is
    illegal.

    Args:
        game: a pyspiel game, sequential, deterministic, with perfect information.
        max_states: refuse a game with more positions than this (raises ValueError).
    """

    def __init__(self, game, max_states: int):
        kind = game.get_type()
        if not (
            kind.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
            and kind.chance_mode == pyspiel.GameType.ChanceMode.DETERMINISTIC
            and kind.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        ):
            raise ValueError(
                f"key: position needs a sequential, deterministic, perfect-information game; {kind.short_name} is not"
            )
        self.game = game
        self.states: list = []
        index: dict[tuple[int, str], int] = {}
        edges: list[list[tuple[int, object]]] = []
        stack = [game.new_initial_state()]
        index[self._key(stack[0])] = 0
        self.states.append(stack[0])
        edges.append([])
        while stack:
            state = stack.pop()
            row = index[self._key(state)]
            for a in state.legal_actions():
                child = state.child(a)
                if not child.is_terminal() and (k := self._key(child)) not in index:
                    if len(index) >= max_states:
                        raise ValueError(
                            f"{kind.short_name} has more than {max_states} positions (raise max_states to try)"
                        )
                    index[k] = len(self.states)
                    self.states.append(child)
                    edges.append([])
                    stack.append(child)
                edges[row].append((a, child))
        n, width, players = len(self.states), game.num_distinct_actions(), game.num_players()
        self.player = np.array([s.current_player() for s in self.states])
        self.legal = np.zeros((n, width), dtype=bool)
        self.children = np.full((n, width), -1)
        self.returns = np.zeros((n, width, players))
        for row, moves in enumerate(edges):
            for a, child in moves:
                self.legal[row, a] = True
                if child.is_terminal():
                    self.returns[row, a] = child.returns()
                else:
                    self.children[row, a] = index[self._key(child)]
        self.order = self._children_first(n)
        self.zero_sum = two_player_zero_sum(game)
        players = tuple(range(game.num_players()))
        # the game-theoretic move values: every player takes its best move
        self.solved = self._values(None, players)[0] if self.zero_sum else None

    @staticmethod
    def _key(state) -> tuple[int, str]:
        return state.current_player(), str(state)

    def _children_first(self, n: int) -> list[int]:
        """The rows in an order where every row comes after the rows its moves lead to."""
        order, done = [], np.zeros(n, dtype=bool)
        for root in range(n):
            stack = [(root, False)]
            while stack:
                row, expanded = stack.pop()
                if done[row]:
                    continue
                if expanded:
                    done[row] = True
                    order.append(row)
                    continue
                stack.append((row, True))
                stack += [(c, False) for c in self.children[row] if c >= 0 and not done[c]]
        return order

    def _values(
        self, pi: np.ndarray | None, best: tuple[int, ...] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """One pass over the positions, children first: the players in `best` take their best
        move, the others play `pi` ((S, A) move probabilities).

        Returns:
            q: (S, A) each move's value for the player to move; values: (S, players) each
            position's expected returns.
        """
        q = np.zeros(self.legal.shape)
        value = np.zeros((len(self.states), self.returns.shape[2]))
        for row in self.order:
            legal, kids = self.legal[row], self.children[row]
            result = np.where((kids >= 0)[:, None], value[np.maximum(kids, 0)], self.returns[row])
            q[row] = np.where(legal, result[:, self.player[row]], 0.0)
            if self.player[row] in best:
                value[row] = result[np.flatnonzero(legal)[np.argmax(q[row][legal])]]
            else:
                value[row] = np.where(legal, pi[row], 0.0) @ result
        return q, value

    def action_values(self, pi: np.ndarray) -> np.ndarray:
        """(S, A) the value of each move at each position, for the player to move, when every
        player plays `pi` ((S, A) move probabilities) afterwards."""
        return self._values(pi)[0]

    def start_values(self, pi: np.ndarray) -> np.ndarray:
        """Each player's expected return from the start when every player plays `pi`."""
        return self._values(pi)[1][0]

    def nash_conv(self, pi: np.ndarray) -> float:
        """Sum over players of what a best response against `pi` gains over `pi` itself, exact
        (each player's best response is the pass with that player taking its best move)."""
        on_policy = self.start_values(pi)
        players = range(self.returns.shape[2])
        return float(sum(self._values(pi, (p,))[1][0, p] - on_policy[p] for p in players))

    def blunders(self, pi: np.ndarray) -> tuple[int, float]:
        """(positions whose most likely move under `pi` lowers the game-theoretic value, mean
        probability on value-losing moves over all positions); two-player zero-sum games."""
        best = np.where(self.legal, self.solved, -np.inf).max(axis=1, keepdims=True)
        losing = self.legal & (self.solved < best - 1e-9)
        greedy = np.argmax(np.where(self.legal, pi, -1.0), axis=1)
        count = int(losing[np.arange(len(greedy)), greedy].sum())
        return count, float(np.where(losing, pi, 0.0).sum(axis=1).mean())


class RegretTable:
    """CFR+ over a game's information states (OpenSpiel's `CFRPlusSolver`: regret matching+ on exact
    counterfactual values, alternating updates, linear averaging), its sums kept in the run's state.

    `average()` is CFR+'s average policy in the rows of `policy` (the table's `TabularPolicy`): what
    `target: cfr_plus` fits the network to. Its NashConv goes to 0 with the iterations, for any
    number of players on the poker games (OpenSpiel: 3-player Kuhn 0.003 after 100 iterations).
    """

    def __init__(self, game, policy):
        from open_spiel.python.algorithms import cfr  # start-up time: absl

        self.solver = cfr.CFRPlusSolver(game)
        self.nodes = self.solver._info_state_nodes  # OpenSpiel keeps the sums per information state
        self.rows = policy.state_lookup
        self.shape = policy.action_probability_array.shape

    @property
    def iterations(self) -> int:
        return self.solver._iteration

    def iterate(self, n: int) -> None:
        for _ in range(n):
            self.solver.evaluate_and_update_policy()

    def average(self) -> np.ndarray:
        """(S, A) CFR+'s average policy, in the table's row order."""
        avg = self.solver.average_policy()
        out = np.zeros(self.shape)
        for key, row in self.rows.items():
            out[row] = avg.action_probability_array[avg.state_lookup[key]]
        return out

    def _sums(self, which: str) -> list[list[float]]:
        out = np.zeros(self.shape)
        for key, node in self.nodes.items():
            for a, v in getattr(node, which).items():
                out[self.rows[key], a] = v
        return out.tolist()

    def saved(self) -> dict:
        """The solver's sums and iteration count (JSON: the run's state, kept in checkpoints)."""
        return {
            "iteration": self.iterations,
            "regret": self._sums("cumulative_regret"),
            "policy": self._sums("cumulative_policy"),
        }

    def restore(self, saved: dict) -> None:
        """Back to `saved()`'s sums: the next iterations are those the saved run would have made."""
        from open_spiel.python.algorithms import cfr

        regret, policy = np.array(saved["regret"]), np.array(saved["policy"])
        for key, node in self.nodes.items():
            row = self.rows[key]
            node.cumulative_regret.clear()
            node.cumulative_policy.clear()
            for a in node.legal_actions:  # the order the solver first wrote them in
                node.cumulative_regret[a] = float(regret[row, a])
                node.cumulative_policy[a] = float(policy[row, a])
        self.solver._iteration = saved["iteration"]
        cfr._update_current_policy(self.solver._current_policy, self.nodes)


def _kl(p: np.ndarray, logq: np.ndarray, legal: np.ndarray) -> float:
    """Mean over states of KL(p || q) over the legal moves."""
    logp = np.log(np.where(legal & (p > 0), p, 1.0))
    return float((np.where(legal, p * (logp - np.where(legal, logq, 0.0)), 0.0)).sum(1).mean())


class _Table:
    """One game's rows (information states, or positions with `key: position`), their move
    sequences and the magnet."""

    def __init__(self, name: str, params: dict, agent, tokenizer, fw: FullWidthConfig):
        env = games.make(name, **params)
        self.name, self.game = name, getattr(env, "game", None)
        if self.game is None:
            raise ValueError(f"full_width needs an OpenSpiel game; {name} is native")
        self.tree: PositionTree | None = None
        self.regrets: RegretTable | None = None
        if fw.key == "position":
            self.tree = PositionTree(self.game, fw.max_states)
            states, self.legal = self.tree.states, self.tree.legal
        else:
            self.policy = info_states(self.game, fw.max_states)
            states = self.policy.states
            self.legal = self.policy.legal_actions_mask.astype(bool)
            if fw.target == "cfr_plus":
                self.regrets = RegretTable(self.game, self.policy)
        self.rows_named = "positions" if self.tree else "information states"
        self.size = len(states)
        self.seqs: list[TrainingSequence] = []
        self.rows: list[tuple[int, int]] = []  # (state row, action) of each sequence
        eos = tokenizer.eos_token_id
        rng = np.random.default_rng(0)
        for row, state in enumerate(states):
            turn = turn_at(agent, name, params, state, f"fw{row}", rng)
            try:
                prompt = render_prompt(tokenizer, agent.prompt_messages(turn))
                view = turn.env.view(turn.player)
            finally:
                agent.end_match(turn.match_id)
            moves = list(view.legal_moves)
            if sorted(int(a) for a in view.actions) != sorted(np.flatnonzero(self.legal[row])):
                raise RuntimeError(
                    f"{name}: the text view's moves at {state.history()} are not the game's legal actions"
                )
            for move, action in zip(moves, view.actions):
                reply = tokenizer(agent.reply_for(move), add_special_tokens=False)["input_ids"]
                self.seqs.append(TrainingSequence(prompt, list(reply) + [eos], 0.0, None, moves))
                self.rows.append((row, int(action)))
        by_row: dict[int, list[TrainingSequence]] = {}
        for seq, (row, _) in zip(self.seqs, self.rows):
            by_row.setdefault(row, []).append(seq)
        self.groups = list(by_row.values())  # one per row: a row's moves share a minibatch
        self.index = (
            np.array([r for r, _ in self.rows]),
            np.array([a for _, a in self.rows]),
        )
        self.zero_sum = two_player_zero_sum(self.game)

    def log_policy(self, logprobs: list[list[float]]) -> np.ndarray:
        """(S, A) log pi from each move sequence's per-token log-probabilities (-inf off the legal moves)."""
        out = np.full(self.legal.shape, -np.inf)
        out[self.index] = [sum(lp) for lp in logprobs]
        return out


def _nash_conv(t: _Table, pi: np.ndarray) -> float:
    """NashConv of the (S, A) move probabilities `pi` over the table's rows, exact."""
    from open_spiel.python.algorithms import exploitability as os_expl

    if t.tree is not None:
        return t.tree.nash_conv(pi)
    t.policy.action_probability_array[:] = pi
    return float(os_expl.nash_conv(t.game, t.policy))


def _measure(t: _Table, pi: np.ndarray, tag: str) -> dict[str, float]:
    """The policy's exact NashConv (exploitability in two-player zero-sum games; blunders on a
    position table); leaves `pi` in `t.policy` for the move values."""
    nash_conv = _nash_conv(t, pi)
    out = {f"{tag}nash_conv": nash_conv}
    if t.zero_sum:
        out[f"{tag}exploitability"] = nash_conv / 2
    if t.tree is not None and t.zero_sum:
        blunders, mass = t.tree.blunders(pi)
        out[f"{tag}blunders"], out[f"{tag}blunder_mass"] = float(blunders), mass
    return out


def _cfr_plus(t: _Table, saved: dict, iterations: int) -> np.ndarray:
    """`iterations` more CFR+ iterations over the table (from `saved[t.name]` after a resume),
    saved back; returns CFR+'s average policy."""
    if t.regrets.iterations == 0 and t.name in saved:
        t.regrets.restore(saved[t.name])
    t.regrets.iterate(iterations)
    saved[t.name] = t.regrets.saved()
    return t.regrets.average()


class FullWidth:
    """The full-width steps of a run: `step(learner, state)` makes one (see the module doc).

    Args:
        fw: the run's `full_width` section.
        games: the run's training games (`training.config.TrainingGame`).
        seed: the run's seed (each step's minibatch split draws from it and the step).
        aggregation: the learner's loss aggregation (`learner.loss.aggregation`).
        agent: an `agents.llm_agent.LLMAgent` with the run's agent settings (renders the prompts).
        tokenizer: the policy's tokenizer.
    """

    def __init__(
        self, fw: FullWidthConfig, games: list, seed: int, aggregation: str, agent, tokenizer
    ):
        self.cfg = fw
        self.seed = seed
        self.aggregation = aggregation
        self.tables = [_Table(g.name, dict(g.params), agent, tokenizer, fw) for g in games]

    @property
    def sequences(self) -> int:
        """Move sequences a step scores and fits (one per legal move of every information state)."""
        return sum(len(t.seqs) for t in self.tables)

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens of those sequences, laid end to end."""
        return sum(len(s.prompt_ids) + len(s.completion_ids) for t in self.tables for s in t.seqs)

    def _mmd(self, t: _Table, logp: np.ndarray, magnets: dict, count: int) -> np.ndarray:
        """Magnetic Mirror Descent's target from the policy `logp` (in `t.policy` or on `t.tree`),
        the magnet replaced by the policy every `magnet_every` steps."""
        c = self.cfg
        pi = np.where(t.legal, np.exp(logp), 0.0)
        if t.tree is None:
            t.policy.action_probability_array[:] = pi
        q = action_values(t.game, t.policy) if t.tree is None else t.tree.action_values(pi)
        if t.name not in magnets or (c.magnet_every and count % c.magnet_every == 0):
            magnets[t.name] = pi.tolist()
        log_magnet = np.log(np.maximum(np.array(magnets[t.name]), 1e-30))
        return mmd_target(logp, log_magnet, q, t.legal, c.eta, c.magnet_coef, c.entropy_coef)

    def _fit(self, learner, seqs: list[TrainingSequence], count: int) -> dict[str, float]:
        """`fit_steps` passes over the rows, each `minibatches` learner steps on a random split
        (a row's moves together; the split is the same after a resume)."""
        c = self.cfg
        groups = [g for t in self.tables for g in t.groups]
        rng = np.random.default_rng([self.seed, count])
        fits = []
        for _ in range(c.fit_steps):
            if c.minibatches == 1:
                fits.append(learner.step(seqs))
                continue
            order = rng.permutation(len(groups))
            for part in np.array_split(order, c.minibatches):
                fits.append(learner.step([seq for g in part for seq in groups[g]]))
        return {"grad_norm": float(np.mean([f["grad_norm"] for f in fits])), "lr": fits[-1]["lr"]}

    def step(self, learner, state: dict) -> dict[str, float]:
        """One full-width step: values, targets, `fit_steps` x `minibatches` learner steps. `state` (JSON, kept
        in checkpoints) holds the magnets or CFR+'s sums, the last targets and the step count."""
        count = state.get("full_width_steps", 0)
        last = state.get("full_width_targets", {})
        metrics: dict[str, float] = {}
        seqs: list[TrainingSequence] = []
        targets = {}
        for t in self.tables:
            logp = t.log_policy(learner.logprobs(t.seqs))
            tag = "" if len(self.tables) == 1 else f"{t.name}/"
            metrics.update(_measure(t, np.where(t.legal, np.exp(logp), 0.0), tag))
            if t.name in last:
                metrics[f"{tag}fit_kl"] = _kl(np.array(last[t.name]), logp, t.legal)
            if t.regrets is None:
                magnets = state.setdefault("full_width_magnets", {})
                target = self._mmd(t, logp, magnets, count)
            else:
                target = _cfr_plus(
                    t, state.setdefault("full_width_cfr", {}), self.cfg.cfr_iterations
                )
                metrics[f"{tag}target_nash_conv"] = _nash_conv(t, target)
                if t.zero_sum:
                    metrics[f"{tag}target_exploitability"] = metrics[f"{tag}target_nash_conv"] / 2
            metrics[f"{tag}target_kl"] = _kl(target, logp, t.legal)
            targets[t.name] = target.tolist()
            for s, (row, action) in zip(t.seqs, t.rows):
                # seq_mean_token_mean averages each sequence's tokens: weigh by length so every
                # move's gradient is target(a) x grad log pi(a) whatever its token count
                scale = len(s.completion_ids) if self.aggregation == "seq_mean_token_mean" else 1
                s.advantage = float(target[row, action]) * scale
            seqs += t.seqs
        metrics.update(self._fit(learner, seqs, count))
        state["full_width_targets"] = targets
        state["full_width_steps"] = count + 1
        metrics["samples"] = float(len(seqs))
        return metrics
