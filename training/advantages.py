"""Advantage estimators over recorded matches: one interface, many recipes.

`compute_advantages(matches, cfg, state)` reads a batch of `MatchRecord`s and returns one
`TurnSample` per turn of a learning agent (in match order, then turn order), each holding
its advantage and the `TurnRecord` the learner trains on. Which turns learn: those whose
`agent` is in `cfg.learners`, or, when that is None, every turn with completion tokens.

Every estimator starts from the shaped turn rewards of `turn_rewards`; the episode return
R of a player is the sum of its shaped turn rewards. Groups ("same initial state") are
matches with the same game, params and seed, compared seat by seat; a group of one match
has no comparison, and its advantage is 0. `ESTIMATORS` maps each name to its function,
whose docstring states its formula.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.records import MatchRecord, TurnRecord, outcomes
from core.typed_config import above, at_least, check_fields, option, within

AA_PAST = ("return", "causal")
AA_OTHERS = ("sum", "mean")


@dataclass
class AdvantageConfig:
    estimator: str = option("mars", choices=lambda: tuple(ESTIMATORS))
    """name in ESTIMATORS"""
    learners: list[str] | None = None
    """agent names whose turns are trained on; None: every turn that has completion tokens"""
    gamma: float = option(1.0, check=within(0, 1))
    """turn-level discount of the return-to-go (mars, loo)"""
    reward_scale: float = option(1.0, check=above(0))
    """multiplies the env reward before shaping (Advantage Alignment divides IPD by 5)"""
    format_reward: float = 0.05
    """added to every valid turn"""
    draw_reward: float = 0.1
    """added to each player's last turn of a drawn match"""
    length_penalty_coef: float = option(0.5, check=at_least(0))
    """penalty per (length_max - length_min) tokens beyond length_max"""
    length_max: int = option(2048, check=at_least(1))
    """completion tokens allowed before the length penalty starts"""
    length_min: int = 11
    """shortest sensible completion; sets the penalty's slope with length_max"""
    player_reward_norm: bool = True
    """mars: subtract the per-(game, player) mean turn reward"""
    whiten_rewards: bool = True
    """mars: whiten turn rewards over response tokens"""
    agent_norm: bool = True
    """mars: subtract, per player, the mean of the distinct return-to-go values"""
    agent_norm_unique: bool = True
    """mars: that mean is over distinct values (as MARS does); False: over turns"""
    whiten_advantages: bool = True
    """mars: whiten advantages over response tokens"""
    agent_specific_norm: bool = True
    """mars: both per-player means above are per player (MARS's agent-specific normalisation); False:
    one normalisation shared by every seat, the ablation MARS makes (its separate_norm_for_selfplay:
    false): the reward mean per game over all seats, the return-to-go baseline over all learning turns"""
    norm_by_opponent: bool = False
    """mars: both per-player means are also per opponent (the agents in the other seats), a
    baseline for who the player faced when one batch mixes self-play and league opponents"""
    group_std: bool = True
    """grpo, grpo_median: divide by the group's std"""
    eps: float = option(1e-6, check=above(0))
    """added to stds before dividing"""
    rae_decay: float = option(0.95, check=within(0, 1, closed_high=False))
    """rae: EMA decay of the per-(game, role) baseline"""
    drop_zero_advantage: bool = True
    """rae: drop turns whose advantage is exactly 0"""
    aa_beta: float = option(2.0, check=at_least(0))
    """advantage_alignment: weight of the opponent-shaping term"""
    aa_gamma: float = option(0.96, check=within(0, 1))
    """advantage_alignment: discount"""
    aa_normalize: bool = True
    """advantage_alignment: whiten the advantages over the batch and average (not sum) the past
    own advantages, as the paper's code does; False: the raw equation, whose shaping term grows
    with the payoffs squared and the horizon"""
    aa_past_sum: bool = False
    """advantage_alignment with `aa_normalize`: sum the past own advantages, as the paper's
    equation does, instead of averaging them over the t past decisions (the whitening kept):
    the shaping term then grows with t, so it outweighs a late round's own advantage"""
    aa_past: str = option("return", choices=AA_PAST)
    """advantage_alignment: what a past own advantage a1_k counts. "return": the return-to-go from
    decision k (the paper's code), which holds the rewards of decision t and after, so the shaping
    term depends on the very action it weighs; "causal": only the rewards of decisions k .. t-1
    (what was known before acting at t), minus the same sum of the group's other matches"""
    aa_past_sum_from: int = option(0, check=at_least(0))
    """advantage_alignment with `aa_past_sum`: average the past for the first N batches (training
    steps; counted in the estimator state, so a resume keeps the count) and sum it from then
    on. The averaged form separates the states (retaliation, contrition) but lets mutual
    cooperation erode; summed from the start it tips every state the same way first"""
    aa_others: str = option("sum", choices=AA_OTHERS)
    """advantage_alignment in games of more than two players: how the other players' advantages at
    decision t enter the shaping term. "sum": each other player shapes as the opponent of the
    two-player term does; "mean": their average, so the term keeps its two-player size whatever
    the number of players. Two players: the same"""
    teams: dict[str, str] | None = option(
        None,
        check=(
            lambda v: (
                v is None or all(isinstance(k, str) and isinstance(g, str) for k, g in v.items())
            ),
            "a mapping seat -> team name",
        ),
    )
    """seat -> team name: each seat's env reward becomes its team's mean (`team_rewards`); unlisted
    seats are a team of their own; None: the teams the game declares for each match (codewords,
    werewolf: `MatchRecord.teams`), else every seat its own reward"""
    functional_groups: dict[str, str] | None = option(
        None,
        check=(
            lambda v: (
                v is None or all(isinstance(k, str) and isinstance(g, str) for k, g in v.items())
            ),
            "a mapping seat -> group name",
        ),
    )
    """advevo: seat -> functional group name; unlisted seats are their own group"""
    gigpo_weight: float = option(1.0, check=at_least(0))
    """gigpo: weight of the step-level (anchor state) advantage added to the mars one"""
    gae_lambda: float = option(1.0, check=within(0, 1))
    """critic: GAE lambda (1: Monte-Carlo return minus V; 0: one-step TD)"""

    def __post_init__(self):
        check_fields(self)


@dataclass
class TurnSample:
    """One learning turn and its advantage."""

    match_index: int
    turn_index: int
    advantage: float
    game: str
    player: str
    turn: TurnRecord
    value_target: float | None = None
    """critic: what the value head should predict for this turn's prompt"""
    role: str = ""
    """the player's role in its match where the game deals roles (werewolf's "seer"), else its seat"""


@dataclass
class _Turn:
    m: int  # match index
    k: int  # turn index in the match
    t: int  # this player's decision number in the match
    game: str
    player: str
    role: str  # the player's role in the match where the game deals roles, else its seat
    group: tuple  # (game, params, seed): matches with the same initial state
    opponents: tuple  # agent names in the match's other seats
    reward: float  # shaped
    n_tokens: int
    learn: bool


def _learns(turn: TurnRecord, cfg: AdvantageConfig) -> bool:
    if cfg.learners is None:
        return bool(turn.token_ids)
    return turn.agent in cfg.learners


def length_penalty(n_tokens: int, cfg: AdvantageConfig) -> float:
    """Penalty of a completion of `n_tokens` tokens (0 or negative).

    It is `-length_penalty_coef * max(0, n_tokens - length_max) / (length_max - length_min)`.
    """
    over = max(0, n_tokens - cfg.length_max)
    return -cfg.length_penalty_coef * over / max(1, cfg.length_max - cfg.length_min)


def turn_rewards(match: MatchRecord, cfg: AdvantageConfig) -> list[float]:
    """Shaped reward of every turn of `match`, the reward every estimator starts from.

    For turn k:

        r_k = reward_scale * turn.reward      # env reward from this move to the player's next
            + format_reward                   # if the turn was valid (MARS: +0.05)
            + length_penalty(n_tokens)        # see `length_penalty`
            + draw_reward                     # on a player's last turn of a drawn match

    Args:
        match: the recorded match.
        cfg: the shaping coefficients.

    Returns:
        One shaped reward per turn of `match`, in turn order.
    """
    outcome = match.outcome or (outcomes(match.returns, match.teams) if match.returns else {})
    last = {t.player: i for i, t in enumerate(match.turns)}
    teams = cfg.teams or match.teams  # the config's, else the teams the game declared
    env = team_rewards(match, teams) if teams else [float(t.reward) for t in match.turns]
    rewards = []
    for i, t in enumerate(match.turns):
        r = cfg.reward_scale * env[i]
        if t.valid:
            r += cfg.format_reward
        r += length_penalty(len(t.token_ids), cfg)
        if last[t.player] == i and outcome.get(t.player) == "draw":
            r += cfg.draw_reward
        rewards.append(r)
    return rewards


def team_rewards(match: MatchRecord, teams: dict[str, str]) -> list[float]:
    """Env reward of every turn of `match` once each seat shares its team's (`teams`: seat -> team
    name; a seat it does not list is a team of its own).

    Rewards are aligned by decision number t: seat i's t-th turn gets the mean, over the seats
    of i's team in the match, of their t-th turn's reward (0 for a seat with fewer turns); i's
    last turn gets the mean of what each member received from its t-th turn on. So a seat's
    rewards sum to its team's mean return, and in a game of simultaneous rounds (public goods)
    every round's reward is the team's mean for that round. A team of one keeps its rewards.

    Args:
        match: the recorded match.
        teams: seat -> team name.

    Returns:
        One env reward per turn of `match`, in turn order.
    """
    turns_of: dict[str, list[int]] = defaultdict(list)
    for k, turn in enumerate(match.turns):
        turns_of[turn.player].append(k)
    got = {p: [float(match.turns[k].reward) for k in ks] for p, ks in turns_of.items()}
    seats = sorted(set(match.seats) | set(turns_of))
    team = {p: teams.get(p, p) for p in seats}
    out = [float(turn.reward) for turn in match.turns]
    for p, ks in turns_of.items():
        members = [q for q in seats if team[q] == team[p]]
        for t, k in enumerate(ks):
            if t == len(ks) - 1:  # the rest of every member's rewards lands on the last turn
                shares = [sum(got.get(q, [])[t:]) for q in members]
            else:
                shares = [got[q][t] if t < len(got.get(q, [])) else 0.0 for q in members]
            out[k] = sum(shares) / len(members)
    return out


def _flatten(matches: list[MatchRecord], cfg: AdvantageConfig) -> list[_Turn]:
    out = []
    for m, match in enumerate(matches):
        if match.error is not None:  # an aborted match carries no outcome
            continue
        group = (match.game, json.dumps(match.params, sort_keys=True, default=str), match.seed)
        decision = defaultdict(int)
        opponents = {
            p: tuple(sorted(a for seat, a in match.seats.items() if seat != p)) for p in match.seats
        }
        for k, (turn, r) in enumerate(zip(match.turns, turn_rewards(match, cfg))):
            out.append(
                _Turn(
                    m,
                    k,
                    decision[turn.player],
                    match.game,
                    turn.player,
                    match.roles.get(turn.player, turn.player),
                    group,
                    opponents.get(turn.player, tuple(sorted(match.seats.values()))),
                    r,
                    max(1, len(turn.token_ids)),
                    _learns(turn, cfg),
                )
            )
            decision[turn.player] += 1
    return out


def _returns(turns: list[_Turn]) -> dict[tuple[int, str], float]:
    """Episode return (sum of shaped turn rewards) per (match, seat)."""
    R: dict[tuple[int, str], float] = defaultdict(float)
    for x in turns:
        R[(x.m, x.player)] += x.reward
    return dict(R)


def _rtg(turns: list[_Turn], gamma: float) -> dict[tuple[int, int], float]:
    """Turn-level return-to-go G of every turn over its player's later turns in the match."""
    by_seat: dict[tuple[int, str], list[_Turn]] = defaultdict(list)
    for x in turns:
        by_seat[(x.m, x.player)].append(x)
    G = {}
    for seq in by_seat.values():
        acc = 0.0
        for x in reversed(seq):
            acc = x.reward + gamma * acc
            G[(x.m, x.k)] = acc
    return G


def _weighted_whiten(values: np.ndarray, weights: np.ndarray, zeros: float = 0.0) -> np.ndarray:
    """Whiten per-turn `values` as if each were repeated `weights` times (token counts).

    `zeros` extra tokens per turn-set hold 0 (rewards sit on a turn's last token only);
    pass their total count. Unbiased variance, as MARS's masked_whiten.
    """
    n = weights.sum() + zeros
    mean = (weights * values).sum() / n
    ss = (weights * (values - mean) ** 2).sum() + zeros * mean**2
    if n < 2:
        return values - mean
    return (values - mean) / math.sqrt(ss / (n - 1) + 1e-8)


def _samples(matches, turns: list[_Turn], adv: dict[tuple[int, int], float]) -> list[TurnSample]:
    return [
        TurnSample(
            x.m, x.k, float(adv[(x.m, x.k)]), x.game, x.player, matches[x.m].turns[x.k], role=x.role
        )
        for x in turns
        if x.learn and (x.m, x.k) in adv
    ]


def _learning_seats(turns: list[_Turn]) -> set[tuple[int, str]]:
    return {(x.m, x.player) for x in turns if x.learn}


def _seats_by_match(matches: list[MatchRecord], turns: list[_Turn]) -> dict[int, list[str]]:
    seats: dict[int, set[str]] = defaultdict(set)
    for x in turns:
        seats[x.m].add(x.player)
    return {m: sorted(s | set(matches[m].seats)) for m, s in seats.items()}


# --- estimators -------------------------------------------------------------------------


def mars(
    matches: list[MatchRecord],
    cfg: AdvantageConfig,
    state: dict,
    norm_groups: dict[str, str] | None = None,
) -> list[TurnSample]:
    """MARS's `reinforce` advantage (thu-nics/MARS) with per-player norms, gamma per turn.

    1. r -= mean of r over the turns of the same (game, player) in the batch
       (`player_reward_norm`).
    2. r = whiten(r over response tokens) (`whiten_rewards`).
    3. G_k = sum_{j>=k} gamma^(j-k) r_j over the player's turns of the match.
    4. Per player: G -= mean of the distinct G values (`agent_norm`; over every turn
       without `agent_norm_unique`).
    5. A = whiten(G over response tokens) (`whiten_advantages`).

    "Over response tokens": a turn of n tokens counts n times in the mean and the
    (unbiased) variance; the reward sits on the turn's last token, its other tokens are 0.
    With `norm_by_opponent` the means of steps 1 and 4 are also per opponent (game, player,
    opponents). With `agent_specific_norm: false`, MARS's ablation, they are shared by all
    players: step 1 over the game, step 4 over every learning turn.

    Args:
        matches: the batch of recorded matches.
        cfg: the estimator's settings.
        state: unused (one signature for every estimator).
        norm_groups: seat or game role -> the group whose turns share the per-player means
            (per-role policies: the seat's role, so a role holding several seats is normalised
            as one); None: each seat its own, or in a game that deals roles (werewolf) each
            role its own, whatever seat it was dealt to.

    Returns:
        One `TurnSample` per learning turn.
    """
    turns = _flatten(matches, cfg)
    learn = [x for x in turns if x.learn]
    if not learn:
        return []
    r = np.array([x.reward for x in learn], dtype=np.float64)
    n = np.array([x.n_tokens for x in learn], dtype=np.float64)

    def opp(x: _Turn) -> tuple:  # who the player faced, when the baselines are per opponent
        return x.opponents if cfg.norm_by_opponent else ()

    def seat(
        x: _Turn,
    ) -> str | None:  # one baseline per player, or one shared by all (the ablation)
        if not cfg.agent_specific_norm:
            return None
        if norm_groups:  # a per-role policy's role: named by the game's role or by the seat
            return norm_groups.get(x.role, norm_groups.get(x.player, x.role))
        return x.role

    if cfg.player_reward_norm:
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, x in enumerate(learn):
            groups[(x.game, seat(x), opp(x))].append(i)
        for idx in groups.values():
            r[idx] -= r[idx].mean()
    if cfg.whiten_rewards:
        # the reward sits on each turn's last token; the turn's other n-1 tokens hold 0
        r = _weighted_whiten(r, np.ones_like(n), zeros=(n - 1).sum())
    for x, v in zip(learn, r):
        x.reward = float(v)
    G = _rtg(learn, cfg.gamma)
    A = np.array([G[(x.m, x.k)] for x in learn], dtype=np.float64)
    if cfg.agent_norm:
        players: dict[tuple, list[int]] = defaultdict(list)
        for i, x in enumerate(learn):
            players[(seat(x), opp(x))].append(i)
        for idx in players.values():
            vals = A[idx]
            base = np.unique(np.round(vals, 12)).mean() if cfg.agent_norm_unique else vals.mean()
            A[idx] = vals - base
    if cfg.whiten_advantages:
        A = _weighted_whiten(A, n)
    return _samples(matches, turns, {(x.m, x.k): a for x, a in zip(learn, A)})


def _anchor_key(
    match: MatchRecord, turn: TurnRecord, opponents: tuple, cfg: AdvantageConfig
) -> str:
    """What the mover's policy saw: the prompt (its token ids where the messages are absent)."""
    seen = turn.messages or turn.prompt_token_ids
    return json.dumps(
        [match.game, match.params, opponents if cfg.norm_by_opponent else None, seen],
        sort_keys=True,
        default=str,
    )


def gigpo(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """GiGPO (verl-agent's step-level credit, here over game states): `mars` plus a step term.

    A = A_mars + gigpo_weight * A_step. Turns whose mover saw the very same prompt (same
    game and params, and with `norm_by_opponent` the same opponents) form an anchor group,
    wherever in the batch they occur; within it:

        A_step = (G - mean G) / (std G + eps)     # unbiased std; without `group_std`, only centred

    with G the turn's return-to-go of shaped rewards (gamma per turn). A turn whose prompt
    occurs once gets A_step = 0. Board games revisit positions across a batch, so the moves
    made from one position are compared with each other, not only whole games.
    """
    episode = mars(matches, cfg, state)
    learn = [x for x in _flatten(matches, cfg) if x.learn]
    G = _rtg(learn, cfg.gamma)
    anchors: dict[str, list[_Turn]] = defaultdict(list)
    for x in learn:
        anchors[_anchor_key(matches[x.m], matches[x.m].turns[x.k], x.opponents, cfg)].append(x)
    step: dict[tuple[int, int], float] = {}
    for members in anchors.values():
        vals = np.array([G[(x.m, x.k)] for x in members])
        a = vals - vals.mean() if len(vals) > 1 else np.zeros(1)
        if cfg.group_std and len(vals) > 1:
            a = a / (vals.std(ddof=1) + cfg.eps)
        step.update({(x.m, x.k): float(v) for x, v in zip(members, a)})
    for s in episode:
        s.advantage += cfg.gigpo_weight * step[(s.match_index, s.turn_index)]
    return episode


def _group_baseline(
    matches, cfg: AdvantageConfig, centre: Callable[[np.ndarray], float]
) -> list[TurnSample]:
    turns = _flatten(matches, cfg)
    R = _returns(turns)
    seats = _learning_seats(turns)
    groups: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    group_of = {(x.m, x.player): x.group for x in turns}
    for seat in sorted(seats):
        groups[(group_of[seat], seat[1])].append(seat)
    A_seat = {}
    for members in groups.values():
        vals = np.array([R[s] for s in members])
        if len(vals) < 2:
            A_seat.update({s: 0.0 for s in members})
            continue
        a = vals - centre(vals)
        if cfg.group_std:
            a = a / (vals.std(ddof=1) + cfg.eps)
        A_seat.update(dict(zip(members, a)))
    return _samples(matches, turns, {(x.m, x.k): A_seat[(x.m, x.player)] for x in turns if x.learn})


def grpo(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """GRPO's group advantage, on every turn of the player.

    `A = (R - mean_group R) / (std_group R + eps)`, with the unbiased std; without
    `group_std`, A is only centred.
    """
    return _group_baseline(matches, cfg, np.mean)


def grpo_median(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """`grpo` centred on the group median.

    `A = (R - median_group R) / (std_group R + eps)`, with the unbiased std; without
    `group_std`, A is only centred.
    """
    return _group_baseline(matches, cfg, np.median)


def rae(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """SPIRAL's role-conditioned advantage estimate (RAE), match by match:

        A = R - b              # b before the update
        b <- rae_decay * b + (1 - rae_decay) * R

    with one EMA baseline b per (game, seat), starting at 0. Turns with A == 0 are dropped
    when `drop_zero_advantage`. Stateful: `state["rae"]` maps "game/seat" -> baseline, so
    pass the same `state` dict every batch.
    """
    turns = _flatten(matches, cfg)
    R = _returns(turns)
    seats = _learning_seats(turns)
    baseline: dict[str, float] = state.setdefault("rae", {})
    A_seat = {}
    for m, players in sorted(_seats_by_match(matches, turns).items()):
        match = matches[m]
        for player in players:
            if (m, player) not in seats:
                continue
            key = f"{match.game}/{player}"
            b = baseline.get(key, 0.0)
            A_seat[(m, player)] = R[(m, player)] - b
            baseline[key] = cfg.rae_decay * b + (1 - cfg.rae_decay) * R[(m, player)]
    adv = {(x.m, x.k): A_seat[(x.m, x.player)] for x in turns if x.learn}
    if cfg.drop_zero_advantage:
        adv = {key: a for key, a in adv.items() if a != 0.0}
    return _samples(matches, turns, adv)


def _seat_groups(
    turns: list[_Turn], value: Callable[[_Turn], float]
) -> tuple[dict[tuple[int, str], list[float]], list[list[tuple[int, str]]]]:
    """Per seat (match, player), `value` of its decisions in decision order; and the seats
    grouped by (the match's initial-state group, player): the matches a leave-one-out baseline
    compares a seat with."""
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    group_of = {}
    for x in turns:  # in decision order within a match
        values[(x.m, x.player)].append(value(x))
        group_of[(x.m, x.player)] = (x.group, x.player)
    groups: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for seat in sorted(values):
        groups[group_of[seat]].append(seat)
    return values, list(groups.values())


def _loo_by_decision(turns: list[_Turn], cfg: AdvantageConfig) -> dict[tuple[int, str, int], float]:
    """Leave-one-out advantage per (match, seat, decision t) for every seat in `turns`."""
    G = _rtg(turns, cfg.gamma)
    rtg, groups = _seat_groups(turns, lambda x: G[(x.m, x.k)])
    out = {}
    for members in groups:
        for s in members:
            others = [o for o in members if o != s]
            for t, g in enumerate(rtg[s]):
                if not others:
                    out[(s[0], s[1], t)] = 0.0
                    continue
                # a match that already ended has return-to-go 0 at decision t
                base = sum(rtg[o][t] if t < len(rtg[o]) else 0.0 for o in others) / len(others)
                out[(s[0], s[1], t)] = g - base
    return out


def _causal_past(turns: list[_Turn], gamma: float) -> dict[tuple[int, str, int, int], float]:
    """(match, seat, k, t) -> decision k's leave-one-out advantage counted on the rewards of
    decisions k .. t-1 only: sum_{j=k}^{t-1} gamma^(j-k) r_j minus the mean of the same sum over
    the group's other matches (a match that already ended adds 0). Nothing in it depends on the
    action at t, unlike the return-to-go."""
    rewards, groups = _seat_groups(turns, lambda x: x.reward)

    def window(r: list[float], k: int, t: int) -> float:
        return sum(gamma ** (j - k) * r[j] for j in range(k, min(t, len(r))))

    out = {}
    for members in groups:
        for s in members:
            others = [o for o in members if o != s]
            for t in range(len(rewards[s])):
                for k in range(t):
                    own = window(rewards[s], k, t)
                    base = (
                        sum(window(rewards[o], k, t) for o in others) / len(others)
                        if others
                        else own
                    )
                    out[(s[0], s[1], k, t)] = own - base
    return out


def loo(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """Leave-one-out group baseline (the Advantage Alignment paper's):

        A_t = G_t - mean over the other matches of the group of their G_t

    with t the player's t-th decision and G the return-to-go (gamma per turn); a match that
    already ended has G_t = 0.
    """
    turns = _flatten(matches, cfg)
    A = _loo_by_decision(turns, cfg)
    return _samples(matches, turns, {(x.m, x.k): A[(x.m, x.player, x.t)] for x in turns if x.learn})


def _others_advantage(
    A1: dict[tuple[int, str, int], float], x: _Turn, players: list[str], how: str
) -> float:
    """The other players' advantages at x's decision index, summed (or their mean): a2 of
    `advantage_alignment`; a player without that decision adds 0."""
    others = [p for p in players if p != x.player]
    a2 = sum((A1.get((x.m, p, x.t), 0.0) for p in others), 0.0)
    return a2 / len(others) if how == "mean" else a2


def advantage_alignment(
    matches: list[MatchRecord], cfg: AdvantageConfig, state: dict
) -> list[TurnSample]:
    """Advantage Alignment (Duque et al., ICLR 2025, as its released code computes it):

        A*_t = gamma^t [a1_t + beta gamma (1/t sum_{k<t} gamma^(t-k) a1_k) a2_t]

    with no shaping at t = 0, a1 the player's `loo` advantage and a2 the opponent's at its
    t-th decision (the others' summed, with more players: below), both whitened over every seat's decisions in the batch (mean 0, unbiased
    std 1): the shaping term is then the size of the own advantage, whatever the payoffs'
    scale and the horizon. beta = `aa_beta`, gamma = `aa_gamma`.

    - `aa_past_sum: true`: the past sum is not divided by t (the whitening kept), from batch
      `aa_past_sum_from` on (a count kept in `state["aa_batches"]`).
    - `aa_past: causal`: the past own advantages count only the rewards before t (decision
      k's rewards k .. t-1 against the group's), so the shaping term does not depend on the
      action it weighs.
    - `aa_normalize: false`: the paper's equation on the raw advantages: the past sum not
      divided by t, no whitening.

    More than two players (the paper's Commons Harvest setting): a2_t is the sum over the other
    players j of their a2^j_t (`aa_others: sum`; `mean`: their average), a player without a
    t-th decision adding 0; with two players both are the opponent's a2_t.

    Raises:
        ValueError: a match has fewer than two players.
    """
    turns = _flatten(matches, cfg)
    seats = _seats_by_match(matches, turns)
    for m, players in seats.items():
        if len(players) < 2:
            raise ValueError(
                f"advantage_alignment needs matches of two or more players; match {matches[m].match_id!r} has {len(players)}"
            )
    A1 = _loo_by_decision(turns, cfg)
    scale = 1.0
    if cfg.aa_normalize and len(A1) > 1:
        vals = np.array(list(A1.values()))
        mean, std = vals.mean(), vals.std(ddof=1)
        A1 = {key: (a - mean) / (std + cfg.eps) for key, a in A1.items()}
        scale = 1.0 / (std + cfg.eps)
    causal = _causal_past(turns, cfg.gamma) if cfg.aa_past == "causal" else None
    g, beta = cfg.aa_gamma, cfg.aa_beta
    batch = state.get("aa_batches", 0)  # batches scored before this one
    state["aa_batches"] = batch + 1
    past_sum = cfg.aa_past_sum and batch >= cfg.aa_past_sum_from
    adv = {}
    for x in turns:
        if not x.learn:
            continue
        if causal is None:
            past = sum(g ** (x.t - k) * A1[(x.m, x.player, k)] for k in range(x.t))
        else:  # on the whitened advantages' scale (their batch mean is 0: loo)
            past = scale * sum(g ** (x.t - k) * causal[(x.m, x.player, k, x.t)] for k in range(x.t))
        if cfg.aa_normalize and x.t and not past_sum:
            past /= x.t
        a2 = _others_advantage(A1, x, seats[x.m], cfg.aa_others)
        adv[(x.m, x.k)] = g**x.t * (A1[(x.m, x.player, x.t)] + beta * g * past * a2)
    return _samples(matches, turns, adv)


def advevo(matches: list[MatchRecord], cfg: AdvantageConfig, state: dict) -> list[TurnSample]:
    """AdvEvo-MARL's public baseline:

        A = R - mean of R over every (match, seat) of the same game in the same functional group

    `functional_groups` maps seat -> group; by default each seat is its own group.
    """
    turns = _flatten(matches, cfg)
    R = _returns(turns)
    fg = cfg.functional_groups or {}
    game_of = {(x.m, x.player): x.game for x in turns}
    members: dict[tuple[str, str], list[float]] = defaultdict(list)
    for seat, r in R.items():
        members[(game_of[seat], fg.get(seat[1], seat[1]))].append(r)
    b = {key: float(np.mean(v)) for key, v in members.items()}
    adv = {
        (x.m, x.k): R[(x.m, x.player)] - b[(x.game, fg.get(x.player, x.player))]
        for x in turns
        if x.learn
    }
    return _samples(matches, turns, adv)


def ranks_to_advantages(ranks: Sequence[int], eps: float = 1e-6) -> np.ndarray:
    """ArenaRL advantages of one group's ranks:

        r_i = 1 - rank_i / (N - 1)              # rank 0 = best
        A_i = (r_i - mean r) / (std r + eps)    # unbiased std

    Args:
        ranks: the 0-based rank of each of the group's N items.
        eps: added to the std before dividing.

    Returns:
        The N advantages; zeros for a group of one, or one where every rank is equal.
    """
    ranks = np.asarray(ranks, dtype=float)
    n = len(ranks)
    if n < 2:
        return np.zeros(n)
    r = 1.0 - ranks / (n - 1)
    std = r.std(ddof=1)
    return (r - r.mean()) / (std + eps) if std > 0 else np.zeros(n)


def arena_ranks(
    matches: list[MatchRecord],
    cfg: AdvantageConfig,
    state: dict,
    ranks: list[dict[str, int]] | None = None,
) -> list[TurnSample]:
    """ArenaRL's tournament-based relative ranking: `ranks_to_advantages` of each group's ranks.

    With ranks 0 (best) .. N-1 in a group of N, r = 1 - rank/(N-1), z-scored in the group
    (unbiased std + 1e-6), applied to every turn of the seat.

    Args:
        matches: the batch of recorded matches.
        cfg: the estimator's settings.
        state: unused.
        ranks: one dict seat -> rank per match (e.g. from a judge tournament); None: ranks
            from the returns R, ties sharing the best rank (pandas' rank(method="min")).

    Raises:
        ValueError: `ranks` does not hold one dict per match, or lacks a learning seat.
    """
    if ranks is not None and len(ranks) != len(matches):
        raise ValueError(
            f"ranks has {len(ranks)} entries for {len(matches)} matches (one seat->rank dict per match)"
        )
    turns = _flatten(matches, cfg)
    R = _returns(turns)
    seats = _learning_seats(turns)
    group_of = {(x.m, x.player): (x.group, x.player) for x in turns}
    groups: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for seat in sorted(seats):
        groups[group_of[seat]].append(seat)
    A_seat = {}
    for members in groups.values():
        if ranks is not None:
            try:
                rk = [int(ranks[m][p]) for m, p in members]
            except KeyError as e:
                raise ValueError(f"ranks: no rank for seat {e.args[0]!r}") from None
        else:  # 0 = best return; ties share the best rank
            vals = [R[s] for s in members]
            rk = [sum(v > x for v in vals) for x in vals]
        A_seat.update(dict(zip(members, ranks_to_advantages(rk).tolist())))
    return _samples(matches, turns, {(x.m, x.k): A_seat[(x.m, x.player)] for x in turns if x.learn})


def critic(
    matches: list[MatchRecord],
    cfg: AdvantageConfig,
    state: dict,
    values: dict[tuple[int, int], float] | None = None,
) -> list[TurnSample]:
    """PPO's actor-critic advantage with GAE, over each player's turns:

        delta_k = r_k + gamma V_{k+1} - V_k          # V after the last turn = 0
        A_k = delta_k + gamma lambda A_{k+1}         # lambda = gae_lambda
        value target = V_k + A_k

    With `norm_by_opponent`, A is centred per (game, player, opponents) (the value head does
    not see who it plays); A = whiten(A over response tokens) when `whiten_advantages`.

    Args:
        matches: the batch of recorded matches.
        cfg: the estimator's settings.
        state: unused.
        values: (match, turn) -> V_k from the learner's value head (see `learning_samples`).

    Returns:
        One `TurnSample` per learning turn, with its `value_target`.

    Raises:
        ValueError: `values` is None.
    """
    if values is None:
        raise ValueError(
            "the critic estimator needs the value head's estimates (values=; set learner.value_coef > 0)"
        )
    turns = _flatten(matches, cfg)
    learn = [x for x in turns if x.learn]
    by_seat: dict[tuple[int, str], list[_Turn]] = defaultdict(list)
    for x in learn:
        by_seat[(x.m, x.player)].append(x)
    A, target = {}, {}
    for seq in by_seat.values():
        acc, v_next = 0.0, 0.0
        for x in reversed(seq):
            v = float(values.get((x.m, x.k), 0.0))
            acc = x.reward + cfg.gamma * v_next - v + cfg.gamma * cfg.gae_lambda * acc
            A[(x.m, x.k)], target[(x.m, x.k)] = acc, acc + v
            v_next = v
    adv = np.array([A[(x.m, x.k)] for x in learn], dtype=np.float64)
    if cfg.norm_by_opponent:
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, x in enumerate(learn):
            groups[(x.game, x.player, x.opponents)].append(i)
        for idx in groups.values():
            adv[idx] -= adv[idx].mean()
    if cfg.whiten_advantages and len(learn):
        adv = _weighted_whiten(adv, np.array([x.n_tokens for x in learn], dtype=np.float64))
    out = _samples(matches, turns, {(x.m, x.k): a for x, a in zip(learn, adv)})
    for s in out:
        s.value_target = target[(s.match_index, s.turn_index)]
    return out


def learning_samples(matches: list[MatchRecord], cfg: AdvantageConfig) -> list[TurnSample]:
    """Every learning turn with advantage 0: the turns a critic must value before `critic` runs."""
    turns = _flatten(matches, cfg)
    return _samples(matches, turns, {(x.m, x.k): 0.0 for x in turns if x.learn})


ESTIMATORS: dict[str, Callable[..., list[TurnSample]]] = {
    "mars": mars,
    "grpo": grpo,
    "grpo_median": grpo_median,
    "rae": rae,
    "loo": loo,
    "advantage_alignment": advantage_alignment,
    "advevo": advevo,
    "arena_ranks": arena_ranks,
    "gigpo": gigpo,
    "critic": critic,
}


def compute_advantages(
    matches: list[MatchRecord], cfg: AdvantageConfig, state: dict | None = None, **kwargs
) -> list[TurnSample]:
    """One `TurnSample` per learning turn. `state` carries estimator state across batches
    (rae's baselines); keep it in the checkpoint. Extra kwargs go to the estimator
    (`ranks=` for arena_ranks, `values=` for critic)."""
    if cfg.estimator not in ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {cfg.estimator!r}; choose one of {', '.join(ESTIMATORS)}"
        )
    return ESTIMATORS[cfg.estimator](matches, cfg, {} if state is None else state, **kwargs)
