"""Matches of OpenSpiel games as OpenSpiel's standard trajectories, both ways.

OpenSpiel (2.0) records a game as a `pyspiel.Trajectory`: a JSON object

    {"header": {"game_string": "kuhn_poker()", "terminal": true, "returns": [-1.0, 1.0],
                "meta_data": "..."},
     "transitions": [{"player": -1, "action": 2, "chance_outcomes": [[0, 0.33], ...]},
                     {"player": 0, "action": 1, "legal_actions": [0, 1]}, ...]}

with one transition per chance outcome (player -1), move (player >= 0) or simultaneous
joint move (player -2, `joint_action`). `pyspiel.Trajectory(json_text)` reads it back and
`reconstruct_final_state()` / `reconstruct_all_states()` replay it, so OpenSpiel's tools
(and anything that speaks the format) can replay a match played here.

Export (`to_openspiel`): a match record of a game on OpenSpiel's rules (a catalogue game
such as `kuhn_poker`, or `openspiel:<game>`) is replayed from its seed (the env deals the
same cards: chance draws from the match seed) and its recorded actions; the trajectory is
OpenSpiel's own (`pyspiel.Trajectory(final_state)`), with `legal_actions` and
`chance_outcomes` added to each transition. The header's `returns` are the match's
recorded returns, in seat order; `meta_data` is a JSON object under the key
`selfplay_arena` with what OpenSpiel has no field for: match id, game name and params,
seed, seats (agent names), outcome, which turns were random opening moves, which were
invalid replies (and the fallback that played), the times, and the `tail`: the turns that
have no transition, i.e. a forfeit (an invalid reply with the `forfeit` fallback: the match
ends there, so `terminal` is false) and the moves of a simultaneous round it cut short. The LLM side of a turn (messages,
completion, token ids, logprobs) has no place in the format: `arena.dataset` exports it.

Import (`from_openspiel`): a trajectory becomes a match record by replaying it through the
env (its chance outcomes played as recorded), so moves are the game's move texts and
rewards are credited per turn exactly as a match played here. A trajectory exported here
comes back as the record it came from (the LLM fields excepted). One from elsewhere
becomes game `openspiel:<name>` with its parameters, agents named by seat (`player_0`,
...), seed 0 and match id `<file>-<line>`; its seed does not replay its chance events, so
it does not export back to OpenSpiel from the record (the original file is the
trajectory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspiel

import games
from arena.dataset import check_inputs, read_records
from arena.runner import OPENING
from core.output import staged
from core.records import MatchRecord, TurnRecord, outcomes
from games.openspiel_env import OpenSpielEnv

META_KEY = "selfplay_arena"
CHANCE, SIMULTANEOUS = int(pyspiel.PlayerId.CHANCE), int(pyspiel.PlayerId.SIMULTANEOUS)


class NotOpenSpiel(ValueError):
    """The match's game is not played on OpenSpiel's rules (a text-native game)."""


def _env(game: str, params: dict) -> OpenSpielEnv:
    env = games.make(game, **params)
    if not isinstance(env, OpenSpielEnv):
        raise NotOpenSpiel(f"{game} is not an OpenSpiel game")
    return env


def _next_agent(env: OpenSpielEnv) -> str | None:
    """Step dead agents out; the agent to move, or None when the game is over."""
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        return agent
    return None


def replay(record: MatchRecord, envs: dict | None = None) -> OpenSpielEnv:
    """Replay a match from its seed and its recorded moves.

    Args:
        record: a match of a game on OpenSpiel's rules.
        envs: a cache of envs by game and params, reused across matches (building one costs
            more than a replay).

    Returns:
        The env after the last recorded move. NotOpenSpiel for a text-native game; ValueError
        when the recorded moves are not what the seed and the game give (another game version,
        or a match imported from another program's trajectory, whose seed does not replay its
        chance events).
    """
    key = (record.game, json.dumps(record.params, sort_keys=True))
    env = (envs or {}).get(key) or _env(record.game, record.params)
    if envs is not None:
        envs[key] = env
    env.reset(seed=record.seed)
    why = (
        f"match {record.match_id} does not replay from its seed {record.seed} ({{}}); "
        "a match imported from another program's trajectory exports from that trajectory, not its record"
    )
    for turn in record.turns:
        agent = _next_agent(env)
        if agent != turn.player:
            raise ValueError(
                why.format(f"turn {turn.index}: {turn.player} moves where {agent} does")
            )
        if turn.action is None:
            env.forfeit(agent)
            break
        if turn.action not in env.legal_actions(agent):
            raise ValueError(why.format(f"turn {turn.index}: {turn.move!r} is not legal there"))
        env.step(turn.action)
    state = env.state
    if state.is_terminal():
        got = {a: r for a, r in zip(env.possible_agents, state.returns())}
        if any(abs(got[a] - record.returns.get(a, 0.0)) > 1e-9 for a in got):
            raise ValueError(why.format(f"returns {record.returns}, the replay gives {got}"))
    return env


def _annotate(game: pyspiel.Game, transitions: list[dict]) -> None:
    """Add `legal_actions` to move transitions and `chance_outcomes` to chance ones."""
    state = game.new_initial_state()
    for t in transitions:
        if t["player"] == SIMULTANEOUS:
            state.apply_actions(t["joint_action"])
            continue
        if t["player"] == CHANCE:
            t["chance_outcomes"] = [[a, p] for a, p in state.chance_outcomes()]
        else:
            t["legal_actions"] = list(state.legal_actions())
        state.apply_action(t["action"])


def to_openspiel(record: MatchRecord, envs: dict | None = None) -> dict:
    """The OpenSpiel trajectory (a JSON-ready dict) of a match of an OpenSpiel game.

    Args:
        record: a match of a game on OpenSpiel's rules.
        envs: a cache of envs reused across calls (`replay`).

    Returns:
        `{"header": ..., "transitions": [...]}` as `pyspiel.Trajectory` reads it (module docstring).
    """
    env = replay(record, envs)
    trajectory = json.loads(pyspiel.Trajectory(env.state).to_string())
    _annotate(env.game, trajectory["transitions"])
    covered = sum(h.player != CHANCE for h in env.state.full_history())
    meta = {
        "match_id": record.match_id,
        "game": record.game,
        "params": record.params,
        "seed": record.seed,
        "seats": record.seats,
        "outcome": record.outcome,
        "opening_turns": sum(t.agent == OPENING for t in record.turns),
        "invalid": {
            str(t.index): {"fallback": t.fallback, "move": t.move}
            for t in record.turns
            if not t.valid
        },
        "tail": [[t.player, t.action] for t in record.turns[covered:]],
        "error": record.error,
        "policy_version": record.policy_version,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
    }
    trajectory["header"]["returns"] = [
        float(record.returns.get(a, 0.0)) for a in env.possible_agents
    ]
    trajectory["header"]["meta_data"] = json.dumps({META_KEY: meta})
    return trajectory


def _parse(text_or_dict: str | dict) -> dict:
    data = json.loads(text_or_dict) if isinstance(text_or_dict, str) else text_or_dict
    if not isinstance(data, dict) or "header" not in data or "transitions" not in data:
        raise ValueError("not an OpenSpiel trajectory (a JSON object with header and transitions)")
    try:
        trajectory = pyspiel.Trajectory(json.dumps(data))
        trajectory.reconstruct_final_state()  # the moves are legal in that game
    except (pyspiel.SpielError, RuntimeError) as e:
        raise ValueError(
            f"not a valid OpenSpiel trajectory: {str(e).strip().splitlines()[0]}"
        ) from None
    return data


def _meta(header: dict) -> dict | None:
    try:
        meta = json.loads(header.get("meta_data") or "null")
    except json.JSONDecodeError:
        return None
    return meta.get(META_KEY) if isinstance(meta, dict) else None


@dataclass
class _Replay:
    env: OpenSpielEnv
    turns: list[TurnRecord] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)
    last: dict[str, TurnRecord] = field(default_factory=dict)

    def move(self, player: int, action: int | None, agent: str, meta: dict) -> None:
        """One turn, credited as `arena.runner` credits a played one."""
        env = self.env
        who = _next_agent(env)
        if who != env.possible_agents[player]:
            raise ValueError(f"player {player} moves where {who} does")
        index = len(self.turns)
        invalid = meta.get("invalid", {}).get(str(index))
        move = invalid["move"] if invalid and action is None else env.move_text(who, action)
        turn = TurnRecord(
            index,
            who,
            agent,
            move,
            action,
            valid=invalid is None,
            fallback=invalid["fallback"] if invalid else None,
            legal_moves=env.legal_moves(who),
        )
        self.turns.append(turn)
        self.last[who] = turn
        if action is None:
            env.forfeit(who)
        else:
            env.step(action)
        for a, r in env.rewards.items():
            if r:
                self.returns[a] = self.returns.get(a, 0.0) + float(r)
                if a in self.last:
                    self.last[a].reward += float(r)


def from_openspiel(trajectory: str | dict, match_id: str = "openspiel-0") -> MatchRecord:
    """A match record from an OpenSpiel trajectory (its JSON text or dict).

    Args:
        trajectory: a trajectory as `pyspiel.Trajectory` reads it.
        match_id: the id of a trajectory that was not exported here (one exported here keeps its own).

    Returns:
        The match, replayed through the env (module docstring).
    """
    data = _parse(trajectory)
    header = data["header"]
    meta = _meta(header) or {}
    game = pyspiel.load_game(header["game_string"])
    if meta:
        name, params = meta["game"], dict(meta.get("params") or {})
    else:
        name, params = (
            f"openspiel:{game.get_type().short_name}",
            _explicit_params(header["game_string"]),
        )
    env = _env(name, params)
    if str(env.game) != str(game):
        raise ValueError(f"{name} with {params} is {env.game}, the trajectory's game is {game}")
    transitions = [  # read from the JSON: pyspiel's transitions() binding cannot copy them out
        (int(t["player"]), int(t.get("action", -1)), [int(a) for a in t.get("joint_action") or []])
        for t in data["transitions"]
    ]
    env.reset(
        seed=int(meta.get("seed", 0)),
        options={"chance": [a for p, a, _ in transitions if p == CHANCE]},
    )
    seats = dict(meta.get("seats") or {a: a for a in env.possible_agents})
    opening = int(meta.get("opening_turns", 0))
    run = _Replay(env, returns={a: 0.0 for a in env.possible_agents})

    def agent_of(player: int) -> str:
        return OPENING if len(run.turns) < opening else seats[env.possible_agents[player]]

    for player, action, joint in transitions:
        if player == CHANCE:
            continue
        if player == SIMULTANEOUS:
            state = env.state
            for p in [p for p in range(len(joint)) if state.legal_actions(p)]:
                run.move(p, joint[p], agent_of(p), meta)
        else:
            run.move(player, action, agent_of(player), meta)
    for who, action in meta.get("tail", []):  # turns past the last transition (module docstring)
        player = env.possible_agents.index(who)
        run.move(player, action, agent_of(player), meta)
    recorded = header.get("returns") or []
    got = [run.returns[a] for a in env.possible_agents]
    if recorded and any(abs(a - b) > 1e-9 for a, b in zip(recorded, got)):
        raise ValueError(f"the trajectory's returns are {recorded}, replaying it gives {got}")
    error = meta.get("error")
    return MatchRecord(
        match_id=meta.get("match_id", match_id),
        game=name,
        params=params,
        seed=int(meta.get("seed", 0)),
        seats=seats,
        turns=run.turns,
        returns=dict(run.returns),
        outcome={a: "draw" for a in run.returns} if error else outcomes(run.returns),
        started_at=float(meta.get("started_at", 0.0)),
        finished_at=float(meta.get("finished_at", 0.0)),
        error=error,
        policy_version=meta.get("policy_version"),
    )


def _explicit_params(game_string: str) -> dict:
    """The parameters written in a game string (`goofspiel(num_cards=4)` -> {"num_cards": 4})."""
    params = pyspiel.game_parameters_from_string(game_string)
    params.pop("name", None)
    return dict(params)


@dataclass
class OpenSpielExport:
    """What `export_openspiel` or `import_openspiel` wrote."""

    path: Path
    matches: int
    skipped: dict[str, int] = field(
        default_factory=dict
    )  # game -> matches not on OpenSpiel's rules


def _write_lines(out: Path, lines: Iterable[str], overwrite: bool, empty=None) -> int:
    """Write `lines` to `out` in one piece; `empty()`: the error to raise (nothing written) when there are none."""
    n = 0
    with staged(out, overwrite) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
                n += 1
        if not n and empty is not None:
            raise empty()
    return n


def export_openspiel(
    files: Iterable[str | os.PathLike], out: str | os.PathLike, overwrite: bool = False
) -> OpenSpielExport:
    """Write the matches of OpenSpiel games in trajectory JSONL `files` as OpenSpiel
    trajectories, one JSON object per line of `out`.

    Args:
        files: trajectory JSONL files (`core.records`).
        out: the JSONL file to write.
        overwrite: replace an existing `out` (else a ValueError).

    Returns:
        The path, the matches written, and per game the matches skipped (not OpenSpiel games).
        A ValueError when no match is of an OpenSpiel game.
    """
    paths = check_inputs(files)
    summary = OpenSpielExport(Path(out), 0)

    envs: dict = {}

    def lines() -> Iterator[str]:
        for path in paths:
            for record in read_records(path):
                try:
                    trajectory = to_openspiel(record, envs)
                except NotOpenSpiel:
                    summary.skipped[record.game] = summary.skipped.get(record.game, 0) + 1
                    continue
                except ValueError as e:
                    raise ValueError(f"{path}: {e}") from None
                yield json.dumps(trajectory)

    def empty() -> ValueError:
        return ValueError(
            f"no match of an OpenSpiel game in {', '.join(map(str, paths))}"
            + (f" (games: {', '.join(sorted(summary.skipped))})" if summary.skipped else "")
        )

    summary.matches = _write_lines(summary.path, lines(), overwrite, empty)
    return summary


def read_trajectories(path: Path) -> Iterator[tuple[int, dict]]:
    """(number, trajectory) of each trajectory in a file: one JSON object per line, or the
    whole file one object (OpenSpiel's own examples are pretty-printed) or a list of them."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    if isinstance(whole, list):
        yield from enumerate(whole, 1)
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{n}: not a JSON line") from None


def import_openspiel(
    files: Iterable[str | os.PathLike], out: str | os.PathLike, overwrite: bool = False
) -> OpenSpielExport:
    """Write OpenSpiel trajectories (files of them) as a trajectory JSONL file of match records.

    Args:
        files: OpenSpiel trajectory files (`read_trajectories`).
        out: the trajectory JSONL file to write (`core.records`).
        overwrite: replace an existing `out` (else a ValueError).

    Returns:
        The path and the matches written.
    """
    paths = check_inputs(files)

    def lines() -> Iterator[str]:
        for path in paths:
            for n, data in read_trajectories(path):
                try:
                    record = from_openspiel(data, f"{path.stem}-{n:05d}")
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}: trajectory {n}: {e}") from None
                yield record.to_json()

    return OpenSpielExport(Path(out), _write_lines(Path(out), lines(), overwrite))
