"""The match runner: many matches at once, one agent call per agent per step.

Each step the runner advances every live match to its next decision, gathers the pending
turns of all matches by agent, and calls `agent.act(turns)` once per agent: an LLM agent
answers all of its turns in a single backend batch, so throughput grows with the number
of concurrent matches. A match that ends frees its slot in the same pass: the next queued
match starts there and its first decision joins that pass's batch, so batches stay full
while the queue lasts. Finished matches are yielded (and appended to the JSONL file, if
one is given) as soon as they end, so a killed run keeps every finished match; the order
is the order they end in, and within one pass the live matches' start order.

Reproducibility: a match's env is reset with its seed and every agent decision in that
match draws from one `np.random.Generator` seeded from it (and LLM sampling is seeded per
match and decision), so a run's records are identical whatever the concurrency.

Openings: `MatchPlan.opening = k` starts the match with 0..k (uniform, from the match
seed) uniformly random legal moves, recorded as turns of the agent `OPENING`, so
self-play reaches positions the policy alone would not (both seat orders of a pair with
one seed open the same way). The agents take over from there. `MatchPlan.start` instead
replays the given actions (recorded as `OPENING` turns too): a match that restarts from a
known position (training.restarts); with `MatchPlan.explore` the first decision there is an
exploring one: a constrained LLM agent plays a uniformly drawn legal move as its own turn.

An agent that raises (a failing backend) ends `play` with `AgentFailed`, one line naming the
agent and its backend; every match that had ended is yielded and written first.

Invalid moves: agents apply their own retry/fallback policy; a record that still has no
action (`fallback="forfeit"`) ends the match through `env.forfeit(player)`, i.e. the
env's illegal-move rule (offender `illegal_reward`, others 0).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

import games
from agents.base import Agent, PendingTurn, WrongGame
from core.records import (
    MatchRecord,
    TurnRecord,
    append_jsonl,
    check_jsonl_out,
    other_seat_of,
    outcomes,
)


@dataclass
class MatchPlan:
    """One match to play."""

    match_id: str
    game: str
    seats: list[str]  # agent names in seat order: seats[i] plays player_i
    seed: int = 0
    params: dict = field(default_factory=dict)
    opening: int = (
        0  # the match opens with 0..opening random legal moves (see the module docstring)
    )
    start: tuple[
        int, ...
    ] = ()  # actions replayed before the agents take over (a restart position); then no opening
    explore: bool = False  # with `start`: the first decision after it is an exploring one (`PendingTurn.explore`)


OPENING = "opening"  # agent name on the turns of a random opening


def plan_matches(
    game: str,
    agent_names: list[str],
    n: int,
    seed: int = 0,
    params: dict | None = None,
    prefix: str = "m",
    opening: int = 0,
) -> list[MatchPlan]:
    """`n` matches of `game` with seats rotated so each agent plays each seat equally often.

    With two agents that is alternating seats; match i gets seed `seed + i`; every match
    opens with 0..`opening` random moves.
    """
    if n < 1:
        raise ValueError(f"the number of matches must be >= 1, got {n}")
    # the seats with these params (public_goods' num_players): before reset, no .agents yet
    players = len(games.make(game, **(params or {})).possible_agents)
    plans = []
    for i in range(n):
        seats = [agent_names[(i + k) % len(agent_names)] for k in range(players)]
        plans.append(
            MatchPlan(f"{prefix}{i:05d}", game, seats, seed + i, dict(params or {}), opening)
        )
    return plans


@dataclass
class LiveMatch:
    plan: MatchPlan
    env: games.TextEnv
    record: MatchRecord
    rng: np.random.Generator
    last_turn: dict[str, TurnRecord] = field(default_factory=dict)
    returns: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def with_other_seats(agents: dict[str, Agent], plans: list[MatchPlan]) -> dict[str, Agent]:
    """`agents` and, for a seat named `X#k` (k a number) that has no agent of its own, agent X:
    one agent in several seats of a match (a team played by one player)."""
    out = dict(agents)
    for name in {n for p in plans for n in p.seats} - set(agents):
        base = other_seat_of(name)
        if base in agents:
            out[name] = agents[base]
    return out


def play(
    plans: Iterable[MatchPlan],
    agents: dict[str, Agent],
    concurrency: int = 16,
    out: str | None = None,
    max_turns: int = 2000,
    progress=None,
) -> Iterator[MatchRecord]:
    """Play `plans` with at most `concurrency` matches live at once; yield each finished match.

    `agents` maps the names used in `MatchPlan.seats` to agents. `out`: JSONL path that
    every finished match is appended to. `progress`: an `core.progress.Progress` (or any
    tqdm-like object): `update(1)` per finished match and, if it has one, `turns(n, tokens)`
    after every batched agent call (turns played, tokens generated), so a long match shows
    as it is played.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (matches live at once), got {concurrency}")
    if out:
        check_jsonl_out(out)
    queue = list(plans)[::-1]
    agents = with_other_seats(agents, queue)
    missing = {name for p in queue for name in p.seats} - set(agents)
    if missing:
        raise ValueError(f"no agent named {', '.join(sorted(missing))} (have: {', '.join(agents)})")
    for warning in untrained_params_warnings(queue, agents):
        if hasattr(progress, "write"):  # tqdm: above the bar, not inside it
            progress.write(warning, file=sys.stderr)
        else:
            print(warning, file=sys.stderr)
    live: list[LiveMatch] = []
    while queue or live:
        # One pass: advance each live match (in start order) to its next decision; a slot that
        # frees is refilled at once, so the new match's first decision joins this pass's batch.
        pending: dict[str, list[tuple[LiveMatch, PendingTurn]]] = defaultdict(list)
        still_live: list[LiveMatch] = []
        to_advance = deque(live)
        while to_advance or (queue and len(still_live) < concurrency):
            m = to_advance.popleft() if to_advance else start_match(queue.pop())
            player = next_decision(m, max_turns)
            if player is None:
                yield _close(m, agents, out, progress)
                continue
            still_live.append(m)
            seat_agent = m.plan.seats[m.env.possible_agents.index(player)]
            explore = (
                m.plan.explore and bool(m.plan.start) and len(m.record.turns) == len(m.plan.start)
            )
            pending[seat_agent].append(
                (m, PendingTurn(m.plan.match_id, m.env, player, m.rng, explore))
            )
        live = still_live
        for name, items in pending.items():
            try:
                decisions = agents[name].act([turn for _, turn in items])
            except WrongGame:
                yield from _finish_ended(live, agents, out, progress, max_turns)
                raise
            except Exception as e:  # a backend that fails: keep what finished, say who failed
                yield from _finish_ended(live, agents, out, progress, max_turns)
                raise AgentFailed.of(name, agents[name], e) from e
            if len(decisions) != len(items):
                raise RuntimeError(
                    f"agent {name} returned {len(decisions)} moves for {len(items)} turns"
                )
            for (m, turn), rec in zip(items, decisions):
                apply_action(m, turn.player, name, rec)
            if hasattr(progress, "turns"):
                progress.turns(len(decisions), sum(generated_tokens(rec) for rec in decisions))


class AgentFailed(RuntimeError):
    """An agent (its backend) raised during `play`: one line naming the agent, its backend
    and the error. Matches that had finished are yielded (and written) before it is raised;
    the matches still in play are not (a resumed tournament plays them again)."""

    matches_kept = True  # the finished matches are on disk: the CLI says so

    def __init__(self, message: str, agent: str = ""):
        super().__init__(message)
        self.agent = agent

    def __reduce__(self):  # pickles across processes (Ray workers)
        return type(self), (str(self), self.agent)

    @classmethod
    def of(cls, name: str, agent: Agent, error: BaseException) -> AgentFailed:
        """The error for agent `name` raising `error`."""
        backend = getattr(agent, "backend", None)
        what = type(backend if backend is not None else agent).__name__
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return cls(
            f"agent {name!r} ({what}) failed: {type(error).__name__}"
            + (f": {detail}" if detail else ""),
            name,
        )


def _finish_ended(
    live: list[LiveMatch], agents: dict[str, Agent], out: str | None, progress, max_turns: int
) -> Iterator[MatchRecord]:
    """Yield (and write) the live matches that are over: those the agents before a failing one
    ended in this pass."""
    for m in live:
        if next_decision(m, max_turns) is None:
            yield _close(m, agents, out, progress)


def _close(m: LiveMatch, agents: dict[str, Agent], out: str | None, progress) -> MatchRecord:
    """Finish a match that is over: its record, the agents told, the JSONL appended, progress."""
    rec = finish_match(m)
    for name in set(m.plan.seats):
        if hasattr(agents[name], "end_match"):
            agents[name].end_match(m.plan.match_id)
    if out:
        append_jsonl(out, rec)
    if progress is not None:
        progress.update(1)
    return rec


CONTROLS = ("blank_messages",)  # evaluation controls (`evaluation.messages`): not another game


def untrained_params_warnings(plans: list[MatchPlan], agents: dict[str, Agent]) -> list[str]:
    """One line per (agent, game, params) where a trained checkpoint plays a game it trained on
    with other parameters (e.g. another board rendering), which it silently plays badly. An
    evaluation control among the params (`CONTROLS`: the blanked-messages twin) is no other game."""
    out = []
    for name, agent in agents.items():
        trained = getattr(agent, "trained_games", None)
        if not trained:
            continue
        seen = set()
        for p in plans:
            key = (p.game, json.dumps(p.params, sort_keys=True, default=str))
            if name not in p.seats or key in seen:
                continue
            seen.add(key)
            on_game = [params for game, params in trained if game == p.game]
            played = {k: v for k, v in p.params.items() if k not in CONTROLS}
            if on_game and played not in on_game:
                out.append(
                    f"warning: {name} trained on {p.game} with params {on_game[0]} but plays it with {p.params}, "
                    f"which it may play badly; give the game those params (--param KEY=VALUE, or params: in a config)"
                )
    return out


def start_match(plan: MatchPlan) -> LiveMatch:
    env = games.make(plan.game, **plan.params)
    env.reset(seed=plan.seed)
    if len(plan.seats) != len(env.possible_agents):
        raise ValueError(
            f"{plan.game} has {len(env.possible_agents)} seats, match {plan.match_id} names {len(plan.seats)} agents"
        )
    record = MatchRecord(
        match_id=plan.match_id,
        game=plan.game,
        params=dict(plan.params),
        seed=plan.seed,
        seats=dict(zip(env.possible_agents, plan.seats)),
        started_at=time.time(),
        roles=dict(getattr(env.unwrapped, "roles", {})),  # drawn at reset: the match's roles, teams
        teams=dict(getattr(env.unwrapped, "teams", {})),
    )
    # The agents' stream must be independent of the env's (seeded with the same number):
    # sharing it lets a random agent's draws line up with the deal.
    m = LiveMatch(plan, env, record, np.random.default_rng([plan.seed, 1]))
    if plan.start:
        _play_start(m)
    elif plan.opening:
        _play_opening(m, np.random.default_rng([plan.seed, 2]))
    return m


def _play_start(m: LiveMatch) -> None:
    """Replay `plan.start`; ValueError when an action is not legal there or the match ends first."""
    for k, action in enumerate(m.plan.start):
        player = next_decision(m, max_turns=len(m.plan.start) + 1)
        if (
            player is None
            or m.env.is_free_text(player)
            or action not in m.env.legal_actions(player)
        ):
            raise ValueError(
                f"match {m.plan.match_id}: start action {k} ({action}) of {list(m.plan.start)} is not a legal move "
                f"of {m.plan.game} there"
            )
        apply_action(
            m,
            player,
            OPENING,
            TurnRecord(0, player, OPENING, m.env.move_text(player, action), action),
        )


def _play_opening(m: LiveMatch, rng: np.random.Generator) -> None:
    """0..plan.opening uniformly random legal moves (stops early at a free-text turn).

    The opening leaves the result to the players: on an OpenSpiel game it never draws a
    move that would end the match, and stops when every move would.
    """
    for _ in range(int(rng.integers(0, m.plan.opening + 1))):
        player = next_decision(m, max_turns=m.plan.opening + 1)
        if player is None or m.env.is_free_text(player):
            return
        legal = m.env.legal_actions(player)
        state = getattr(m.env, "state", None)
        if hasattr(state, "child") and not state.is_simultaneous_node():
            legal = [a for a in legal if not state.child(a).is_terminal()]
            if not legal:
                return
        action = legal[int(rng.integers(len(legal)))]
        apply_action(
            m,
            player,
            OPENING,
            TurnRecord(0, player, OPENING, m.env.move_text(player, action), action),
        )


def next_decision(m: LiveMatch, max_turns: int) -> str | None:
    """Step dead agents out; the agent to move next, or None when the match is over."""
    env = m.env
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        if len(m.record.turns) >= max_turns:
            m.record.error = f"stopped after max_turns={max_turns} decisions"
            return None
        return agent
    return None


def apply_action(m: LiveMatch, player: str, agent_name: str, rec: TurnRecord) -> None:
    env = m.env
    rec.index = len(m.record.turns)
    rec.player, rec.agent = player, agent_name
    if not rec.legal_moves and not env.is_free_text(player):
        rec.legal_moves = env.legal_moves(player)
    m.record.turns.append(rec)
    m.record.prompt_tokens += len(rec.prompt_token_ids)
    m.record.completion_tokens += generated_tokens(rec)
    m.last_turn[player] = rec
    if rec.action is None:
        env.forfeit(player)
    else:
        env.step(rec.action)
    for a, r in env.rewards.items():
        if r:
            m.returns[a] += float(r)
            if a in m.last_turn:
                m.last_turn[a].reward += float(r)


def generated_tokens(rec: TurnRecord) -> int:
    """Tokens the agent generated for a turn, every attempt (retries) included."""
    return sum(len(a.token_ids) for a in rec.attempts) or len(rec.token_ids)


def finish_match(m: LiveMatch) -> MatchRecord:
    rec = m.record
    rec.returns = {a: m.returns[a] for a in m.env.possible_agents}
    rec.outcome = (
        {a: "draw" for a in rec.returns} if rec.error else outcomes(rec.returns, rec.teams)
    )
    rec.finished_at = time.time()
    return rec
