"""A checkpoint tournament during training: its ratings set the league's PFSP weights.

Every `league.tournament.every` steps the training loop plays a tournament
(`tournaments.run.run_tournament`) between the current policy (player `policy`), the
league's snapshots (`ckpt-N`) and its bots, on the training games with the training
agent's sampling (so the ratings predict the training matches), in the configured format
(Swiss by default; `max_matches` caps it: Swiss plays fewer rounds to fit, a format with a
budget option gets it). Its Bradley-Terry Elo then replaces the league's decayed win-rate
records (`League.use_ratings`, `policy` standing for the learner) until the next one.

The store is `<run>/tournaments/step_N.db` (its trajectories beside it), a tournament like
any other: `arena tournament`'s report tools read it; its snapshot players are labels
("snapshot <file>"), not specs an arena config could build. It draws nothing from the
training RNG streams (its agents' seeds come from the run's seed and the step), and a run
killed during one resumes it from its store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from agents.llm_agent import LLMAgent, LLMAgentConfig
from tournaments.config import load_config
from tournaments.formats import format_options, swiss_rounds
from tournaments.matches import arena_play_matches
from tournaments.run import run_tournament
from tournaments.store import jsonl_beside
from training.config import POLICY, LeagueTournament
from training.league import League
from training.sections import Matches


@dataclass(frozen=True)
class TournamentSetting:
    """What a league tournament takes from the run: the `league.tournament` section, how the
    run plays matches, the agent's sampling, the run folder (for its name and store) and seed."""

    tournament: LeagueTournament
    matches: Matches
    agent: LLMAgentConfig
    run_dir: str
    seed: int


def tournament_config(setting: TournamentSetting, league: League, step: int):
    """The `tournaments.config.TournamentConfig` of step `step`'s league tournament."""
    t, m = setting.tournament, setting.matches
    players = {POLICY: f"the training policy at step {step}"}
    players.update(
        {o.name: o.spec if o.kind == "bot" else f"snapshot {o.spec}" for o in league.opponents}
    )
    players = dict(
        sorted(players.items())
    )  # the order a stored config reads back in (`load_tournament`)
    options: dict = {}
    if t.max_matches and "max_matches" in format_options(t.format):
        options["max_matches"] = t.max_matches
    elif t.max_matches:  # Swiss (config-checked): as many rounds as the budget holds
        per_round = len(players) // 2 * t.games_per_pairing * len(m.games)
        options["rounds"] = max(1, min(swiss_rounds(len(players)), t.max_matches // per_round))
    return load_config(
        {
            "name": f"{Path(setting.run_dir).name} league at step {step}",
            "format": t.format,
            "players": players,
            "games": [
                {"name": g.name, "params": dict(g.params), "opening": g.opening} for g in m.games
            ],
            "games_per_pairing": t.games_per_pairing,
            "seed": setting.seed + step,
            "format_options": options,
            "arena": {"concurrency": m.concurrency, "max_turns": m.max_turns},
        }
    )


def play_league_tournament(
    setting: TournamentSetting, league: League, step: int, backend, opponents
) -> dict[str, float] | None:
    """Play step `step`'s tournament (policy on `backend`, league agents from `opponents`, a
    `training.rollouts.Opponents`); the players' Elo, or None with no opponent to rate."""
    if not league.opponents:
        return None
    config = tournament_config(setting, league, step)
    seeds = np.random.default_rng([setting.seed, step, 20]).integers(
        0, 2**31 - 1, size=len(config.players)
    )
    agents = {POLICY: LLMAgent(POLICY, backend, replace(setting.agent, seed=int(seeds[0])))}
    for o, seed in zip(league.opponents, seeds[1:]):
        agents[o.name] = opponents.agent(o.name, o.spec, o.kind, seed=int(seed))
    db = Path(setting.run_dir) / "tournaments" / f"step_{step:08d}.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    m = setting.matches
    play = arena_play_matches(agents, jsonl_beside(db), m.concurrency, m.max_turns)
    result = run_tournament(config, play, db)
    return {p: r.elo for p, r in result.ratings.items()}
