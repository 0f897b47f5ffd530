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
    fit            `fit_steps` learner steps on the cross-entropy -sum_a target(a|I) log pi(a|I)
                   over every I (each move sequence's advantage is its target probability: at
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

Config (`full_width:`; `FullWidthConfig`): `eta` (step size per unit of return), `magnet_coef`
(alpha), `magnet_every`, `fit_steps`, `max_states`. Games: OpenSpiel games with information-state
strings and at most `max_states` of them; constrained agent, pure self-play. Metrics per step:
`nash_conv` (and `exploitability` for two-player zero-sum games) of the policy the step
started from, exact; `target_kl` (mean KL(target || pi) over information states: how far the
step asks the policy to move); `fit_kl` (the same KL of the previous step's target against
the policy after its fit: what the network failed to follow).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import games
from evaluation.exploitability import info_states, turn_at, two_player_zero_sum
from training.learner import Sequence, render_prompt


@dataclass
class FullWidthConfig:
    """Full-width self-play (`training.full_width`): exact values over a small game's whole tree."""

    enabled: bool = False
    """train on every information state with exact move values instead of sampled matches"""
    eta: float = 1.0
    """Magnetic Mirror Descent's step size, per unit of return (scale it down for games with larger payoffs)"""
    magnet_coef: float = 0.2
    """alpha: the pull towards the magnet (and the temperature of the equilibrium a fixed magnet leads to)"""
    magnet_every: int = 10
    """replace the magnet with the current policy every N steps; 0: the magnet stays the initial policy"""
    entropy_coef: float = 0.0
    """epsilon: a second, fixed magnet at the uniform policy (an entropy bonus): it flattens every step's
    target, so a move the policy has written off comes back when it pays (a pretrained model's peaked
    distributions); the fixed point is then a quantal response equilibrium at temperature epsilon"""
    fit_steps: int = 1
    """learner steps per training step on the cross-entropy to the step's target"""
    max_states: int = 5000
    """refuse a game with more information states than this"""

    def __post_init__(self):
        checks = (
            ("eta", self.eta > 0, "> 0"),
            ("magnet_coef", self.magnet_coef >= 0, ">= 0"),
            ("magnet_every", self.magnet_every >= 0, ">= 0"),
            ("entropy_coef", self.entropy_coef >= 0, ">= 0"),
            ("fit_steps", self.fit_steps >= 1, ">= 1"),
            ("max_states", self.max_states >= 1, ">= 1"),
        )
        for name, ok, what in checks:
            if not ok:
                raise ValueError(f"{name} must be {what}, got {getattr(self, name)}")


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


def _kl(p: np.ndarray, logq: np.ndarray, legal: np.ndarray) -> float:
    """Mean over states of KL(p || q) over the legal moves."""
    logp = np.log(np.where(legal & (p > 0), p, 1.0))
    return float((np.where(legal, p * (logp - np.where(legal, logq, 0.0)), 0.0)).sum(1).mean())


class _Table:
    """One game's information states, their move sequences and the magnet."""

    def __init__(self, name: str, params: dict, agent, tokenizer, max_states: int):
        env = games.make(name, **params)
        self.name, self.game = name, getattr(env, "game", None)
        if self.game is None:
            raise ValueError(f"full_width needs an OpenSpiel game; {name} is native")
        self.policy = info_states(self.game, max_states)
        self.legal = self.policy.legal_actions_mask.astype(bool)
        self.seqs: list[Sequence] = []
        self.rows: list[tuple[int, int]] = []  # (state row, action) of each sequence
        eos = tokenizer.eos_token_id
        rng = np.random.default_rng(0)
        for row, state in enumerate(self.policy.states):
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
                self.seqs.append(Sequence(prompt, list(reply) + [eos], 0.0, None, moves))
                self.rows.append((row, int(action)))
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


class FullWidth:
    """The full-width steps of a run: `step(learner, state)` makes one (see the module doc).

    Args:
        cfg: the run's `TrainConfig` (its games, `agent` and `full_width` sections).
        agent: an `agents.llm_agent.LLMAgent` with the run's agent settings (renders the prompts).
        tokenizer: the policy's tokenizer.
    """

    def __init__(self, cfg, agent, tokenizer):
        self.cfg = cfg.full_width
        self.aggregation = cfg.learner.loss.aggregation
        self.tables = [
            _Table(g.name, dict(g.params), agent, tokenizer, self.cfg.max_states) for g in cfg.games
        ]

    @property
    def sequences(self) -> int:
        """Move sequences a step scores and fits (one per legal move of every information state)."""
        return sum(len(t.seqs) for t in self.tables)

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens of those sequences, laid end to end."""
        return sum(len(s.prompt_ids) + len(s.completion_ids) for t in self.tables for s in t.seqs)

    def step(self, learner, state: dict) -> dict[str, float]:
        """One full-width step: values, targets, `fit_steps` learner steps. `state` (JSON, kept
        in checkpoints) holds the magnets, the last targets and the step count."""
        from open_spiel.python.algorithms import exploitability as os_expl

        c = self.cfg
        count = state.get("full_width_steps", 0)
        magnets = state.setdefault("full_width_magnets", {})
        last = state.get("full_width_targets", {})
        metrics: dict[str, float] = {}
        seqs: list[Sequence] = []
        targets = {}
        for t in self.tables:
            logp = t.log_policy(learner.logprobs(t.seqs))
            pi = np.exp(logp)
            t.policy.action_probability_array[:] = np.where(t.legal, pi, 0.0)
            tag = "" if len(self.tables) == 1 else f"{t.name}/"
            nash_conv = float(os_expl.nash_conv(t.game, t.policy))
            metrics[f"{tag}nash_conv"] = nash_conv
            if t.zero_sum:
                metrics[f"{tag}exploitability"] = nash_conv / 2
            if t.name in last:
                metrics[f"{tag}fit_kl"] = _kl(np.array(last[t.name]), logp, t.legal)
            if t.name not in magnets or (c.magnet_every and count % c.magnet_every == 0):
                magnets[t.name] = pi.tolist()
            log_magnet = np.log(np.maximum(np.array(magnets[t.name]), 1e-30))
            q = action_values(t.game, t.policy)
            target = mmd_target(logp, log_magnet, q, t.legal, c.eta, c.magnet_coef, c.entropy_coef)
            metrics[f"{tag}target_kl"] = _kl(target, logp, t.legal)
            targets[t.name] = target.tolist()
            for s, (row, action) in zip(t.seqs, t.rows):
                # seq_mean_token_mean averages each sequence's tokens: weigh by length so every
                # move's gradient is target(a) x grad log pi(a) whatever its token count
                scale = len(s.completion_ids) if self.aggregation == "seq_mean_token_mean" else 1
                s.advantage = float(target[row, action]) * scale
            seqs += t.seqs
        fits = [learner.step(seqs) for _ in range(c.fit_steps)]
        metrics["grad_norm"] = float(np.mean([f["grad_norm"] for f in fits]))
        metrics["lr"] = fits[-1]["lr"]
        state["full_width_targets"] = targets
        state["full_width_steps"] = count + 1
        metrics["samples"] = float(len(seqs))
        return metrics
