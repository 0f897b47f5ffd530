"""Play an evaluation: the suite's matches through the arena runner, each finished match
committed to the tournament store, resumable after a kill.

    records = play_suite({"agent": agent}, suite("held_out"), matches=100, seed=0)   # in memory
    result = run_eval(config)                                                       # `arena eval`
    evaluate_and_report(config)                                                     # and its report

Both play the plans of `evaluation.suites.plans` with `arena.runner.play` (every pending LLM
turn of all live matches in one backend batch). `run_eval` adds the store: the plans are
scheduled in DIR/eval.db (`tournaments.store.Store`), the runner appends each finished
match to DIR/eval.jsonl and only then is it inserted in the store; on a rerun the store
takes the matches the JSONL has and it lacks (`tournaments.store.read_log`) and only the
missing matches are played. So a `kill -9` loses at most the matches that were being
played and duplicates none.

Own random streams: the arena gives all agents of a match one generator, so what a
random opponent draws would depend on how many draws the evaluated agent made before
(a random fallback, say). `OwnStream` gives every (match, seat) its own generator from
the match seed, so the opponents of two evaluated agents draw the same numbers.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

import games
from agents import checkpoint_of, trained_games
from agents.base import PendingTurn
from agents.by_game import build_agent, check_player
from arena.runner import play
from core.console import make_console
from core.overrides import key_values
from core.progress import Progress
from core.records import MatchRecord, check_writable, read_jsonl
from evaluation.analysis_rows import exploitability_row
from evaluation.analysis_rows import perfect_play_rows as analysis_perfect_play_rows
from evaluation.blunders import blunder_rows, solvable
from evaluation.codewords import codewords_rows
from evaluation.commons import commons_rows
from evaluation.exploitability import duration, nash_conv_seconds
from evaluation.messages import messages_rows
from evaluation.metrics import cells, paired
from evaluation.report import as_rows, print_report, write_html, write_json
from evaluation.social import social_rows
from evaluation.suites import (
    SELF,
    EvalConfig,
    EvalGame,
    field_members,
    num_seats,
    num_teams,
    opponent_label,
    plans,
    unkey,
)
from evaluation.werewolf import werewolf_rows
from tournaments.store import MatchResult, MatchSpec, Store, kept_on_interrupt, read_log

AGENT, BASELINE = "agent", "baseline"


class OwnStream:
    """An agent that draws from its own generator per (match, seat): default_rng([seed, 3, seat]).

    With `exact_probs`, on the turns of the repeated dilemmas (games whose moves are each
    cooperative or not, `is_cooperative`) the agent is first asked for its exact move
    distribution (`action_probabilities`, where it has one and it has a closed form), which
    is kept on the turn's record (`TurnRecord.action_probs`) for the social rows' memory-1
    profile (`evaluation.social`). Asking draws nothing and changes no state the move
    depends on: the matches are the same with it or without it.
    """

    def __init__(self, agent, seeds: dict[str, int], exact_probs: bool = False):
        self.agent, self.seeds = agent, seeds  # seeds: match_id -> match seed
        self.name = agent.name
        self.exact_probs = exact_probs
        self._rngs: dict[tuple[str, str], np.random.Generator] = {}

    def act(self, turns: list[PendingTurn]):
        own = []
        for t in turns:
            key = (t.match_id, t.player)
            if key not in self._rngs:
                self._rngs[key] = np.random.default_rng(
                    [self.seeds[t.match_id], 3, t.env.possible_agents.index(t.player)]
                )
            own.append(PendingTurn(t.match_id, t.env, t.player, self._rngs[key]))
        probs = self._distributions(own) if self.exact_probs else {}
        records = self.agent.act(own)
        for i, dist in probs.items():
            records[i].action_probs = [
                [a.item() if hasattr(a, "item") else a, float(p)] for a, p in dist.items()
            ]
        return records

    def _distributions(self, turns: list[PendingTurn]) -> dict[int, dict]:
        """Turn index -> the agent's exact distribution, for the turns of repeated dilemmas."""
        ask = getattr(self.agent, "action_probabilities", None)
        idx = [
            i
            for i, t in enumerate(turns)
            if hasattr(getattr(t.env, "unwrapped", t.env), "is_cooperative")
        ]
        if ask is None or not idx:
            return {}
        dists = ask([turns[i] for i in idx])
        return {} if dists is None else dict(zip(idx, dists))

    def end_match(self, match_id: str) -> None:
        for key in [k for k in self._rngs if k[0] == match_id]:
            del self._rngs[key]
        if hasattr(self.agent, "end_match"):
            self.agent.end_match(match_id)

    def __getattr__(self, name):  # trained_games and the like
        return getattr(self.agent, name)


def opponents(games_: list[EvalGame]) -> dict[str, object]:
    """Seat name -> spec of every opponent seat the plans use."""
    out = {}
    for g in games_:
        for spec in (m for o in g.opponents for m in field_members(o)):
            label = opponent_label(spec)
            for name in [label] + [f"{label}#{j}" for j in range(2, num_seats(g))]:
                if out.setdefault(name, spec) != spec:
                    raise ValueError(
                        f"two different opponents are named {label!r}: give them distinct name: keys"
                    )
    return out


def build_opponents(games_: list[EvalGame]) -> dict:
    """Opponent agents by seat name (the seats of one opponent share one agent)."""
    built: dict[str, object] = {}
    out = {}
    for name, spec in opponents(games_).items():
        if spec == SELF:
            continue  # the evaluated agent itself (play_suite)
        label = opponent_label(spec)
        if label not in built:
            built[label] = build_agent(label, spec)
        out[name] = built[label]
    return out


def play_suite(
    evaluated: dict,
    games_: list[EvalGame],
    matches: int,
    seed: int = 0,
    concurrency: int = 16,
    max_turns: int = 2000,
    out: str | None = None,
    progress=None,
    skip: set[str] | None = None,
    opponent_agents: dict | None = None,
    exact_probs: bool = False,
):
    """Play every evaluated agent (name -> Agent; "agent", "baseline") against the suite.

    Yields each finished MatchRecord (appended to `out` first, when given). `skip`: match
    ids already played. `exact_probs`: record the evaluated agents' exact move distributions
    on the repeated dilemmas (`OwnStream`; one more model pass per LLM batch there). This is
    the call the training loop's evaluation makes (with {"agent": policy});
    `evaluation.metrics.cells(records, "agent")` then gives its rows.
    """
    todo = suite_plans(list(evaluated), games_, matches, seed, skip)
    agents = suite_agents(
        evaluated, games_, {p.match_id: p.seed for p in todo}, opponent_agents, exact_probs
    )
    yield from play(
        todo, agents, concurrency=concurrency, out=out, max_turns=max_turns, progress=progress
    )


def evaluate(
    agent, games_: list[EvalGame], matches: int, seed: int, name: str = AGENT, **play
) -> list:
    """`agent`'s cells (per seat and pooled, `evaluation.metrics.Cell`) from `matches` matches
    per game and opponent, played in memory; `play`: play_suite's keywords (concurrency, ...)."""
    return cells(list(play_suite({name: agent}, games_, matches, seed, **play)), name)


def suite_plans(
    evaluated: list[str],
    games_: list[EvalGame],
    matches: int,
    seed: int,
    skip: set[str] | None = None,
) -> list:
    """The plans of the evaluated agents not in `skip`, interleaved so a baseline is not left for the end."""
    todo = [
        p
        for who in evaluated
        for p in plans(who, games_, matches, seed)
        if p.match_id not in (skip or set())
    ]
    todo.sort(key=lambda p: (p.match_id.split("|", 1)[1], p.match_id))
    return todo


def suite_agents(
    evaluated: dict,
    games_: list[EvalGame],
    seeds: dict[str, int],
    opponent_agents: dict | None = None,
    exact_probs: bool = False,
) -> dict:
    """Every seat's agent (evaluated agents and opponents), each on its own stream (`OwnStream`;
    `exact_probs`: the evaluated agents' turns on the repeated dilemmas carry their distributions)."""
    built = dict(opponent_agents or build_opponents(games_))
    for name, spec in opponents(games_).items():
        if spec == SELF:
            if len(evaluated) != 1:
                raise ValueError(f"opponent {SELF!r} needs a single evaluated agent (no baseline)")
            built[name] = next(iter(evaluated.values()))
    mates = {  # an evaluated agent's other seats of its team, in a game of teams
        f"{name}#{j}": a
        for name, a in evaluated.items()
        for j in range(2, max((num_seats(g) for g in games_ if num_teams(g)), default=0))
    }
    return {
        name: OwnStream(a, seeds, exact_probs and name.split("#")[0] in evaluated)
        for name, a in {**built, **mates, **evaluated}.items()
    }


def build_suite_agents(
    specs: dict, games_: list[EvalGame], seeds: dict[str, int], exact_probs: bool = False
) -> dict:
    """`suite_agents` from the evaluated agents' specs (built on a Ray worker)."""
    return suite_agents(
        {n: build_agent(n, spec) for n, spec in specs.items()}, games_, seeds, None, exact_probs
    )


@dataclass
class EvalRun:
    """A finished evaluation's matches."""

    config: EvalConfig
    records: list[MatchRecord]  # every planned match, in plan order
    played: int = 0  # matches played by this call
    recovered: int = 0  # matches taken from the JSONL on resume
    seconds: float = 0.0
    extra: list[dict] = field(default_factory=list)  # exploitability, blunder and social rows


def check_specs(config: EvalConfig) -> None:
    """ValueError or RuntimeError (one line) for an agent, baseline or opponent spec that cannot
    be built, or a bot that cannot play a game it meets (`WrongGame`: minimax on poker), found
    without loading a model (`agents.by_game.check_player`)."""
    every = [(g.name, g.params) for g in config.games]
    for spec in (config.agent, config.baseline):
        if spec is not None:
            check_player(spec, every)
    for g in config.games:
        for spec in {json.dumps(s, sort_keys=True): s for s in opponents([g]).values()}.values():
            if spec != SELF:
                check_player(spec, [(g.name, g.params)])


def store_paths(out: str | Path) -> tuple[Path, Path]:
    d = Path(out)
    return d / "eval.db", d / "eval.jsonl"


CHANGEABLE_ON_RESUME = (
    "concurrency",
    "max_turns",
    "exploitability",
    "perfect_play",
    "samples",
    "max_states",
    "out",
    "matches",
)  # may change on resume


def _resume_key(config_json: str) -> dict:
    """What a resumed evaluation must keep: everything but CHANGEABLE_ON_RESUME (which changes how many
    matches are played and how, never which match a match id is)."""
    return {k: v for k, v in json.loads(config_json).items() if k not in CHANGEABLE_ON_RESUME}


def run_eval(
    config: EvalConfig, progress=None, evaluated: dict | None = None, ray_pool=None
) -> EvalRun:
    """Play (or resume) `config`'s matches with the store in config.out; return every record.

    `evaluated`: name -> Agent, a cache filled with agents built from the config's specs
    when there is something to play (pass the same dict on to exploitability).
    `ray_pool`: `ray_pool(build)` -> an `arena.ray_runner.RayPool` whose workers build
    their agents with `build()`: the matches are played on Ray (`--ray`).
    """
    check_specs(config)  # a typo or a missing checkpoint fails before the store is made
    db, jsonl = store_paths(config.out)
    start = time.perf_counter()
    names = _compared(config)
    planned = [p for who in names for p in plans(who, config.games, config.matches, config.seed)]
    specs = _match_specs(planned)
    players = {**names, **opponents(config.games)}
    with Store(db) as store:
        store.lock()
        if store.init(config.to_json(), players, key=_resume_key) == "restarted" and jsonl.exists():
            jsonl.rename(jsonl.with_name(f"{jsonl.name}.replaced-{int(time.time())}"))
        store.pin_checkpoints({who: checkpoint_of(spec) for who, spec in names.items()})
        check_writable(jsonl)
        store.add_schedule(specs)
        done = set(store.results())
        recovered = _recover_logged(store, specs, jsonl, done)
        wanted = {p.match_id for p in planned}
        played = 0
        if progress is not None:
            progress.update(len(wanted & done))
        if wanted - done:
            records = _play_missing(config, names, done, jsonl, progress, evaluated, ray_pool)
            for rec in records:
                store.add_result(MatchResult.from_record(rec, jsonl))
                played += 1
    records = _records_in_plan_order(jsonl, planned)
    return EvalRun(config, records, played, recovered, time.perf_counter() - start)


def _match_specs(planned: list) -> list[MatchSpec]:
    """The store's schedule of the planned matches."""
    return [
        MatchSpec(
            p.match_id,
            p.game,
            p.params,
            p.seed,
            p.seats,
            0,
            unkey(p.match_id.split("|")[2]),
            p.opening,
        )
        for p in planned
    ]


def _recover_logged(store, specs: list[MatchSpec], jsonl: Path, done: set) -> int:
    """Store the matches the JSONL holds and the store lacks (all of them if the DB was lost);
    adds their ids to `done` and returns how many."""
    logged = read_log(jsonl, skip=done)  # played but not stored
    recovered = 0
    for spec in specs:
        if spec.match_id not in done and spec.match_id in logged:
            store.add_result(logged.pop(spec.match_id).check(spec, jsonl))
            done.add(spec.match_id)
            recovered += 1
    return recovered


def _play_missing(
    config: EvalConfig, names: dict, done: set, jsonl: Path, progress, evaluated, ray_pool
):
    """Play the matches not in `done`, appending each to `jsonl`: on Ray workers (which build
    the agents) or here, with the agents of `evaluated` (filled from `names`' specs)."""
    if ray_pool is not None:  # the workers build the agents, the store stays here
        todo = suite_plans(list(names), config.games, config.matches, config.seed, done)
        pool = ray_pool(
            functools.partial(
                build_suite_agents,
                names,
                config.games,
                {p.match_id: p.seed for p in todo},
                exact_probs=True,
            )
        )
        return pool.play(
            todo, config.concurrency, config.max_turns, out=str(jsonl), progress=progress
        )
    evaluated = evaluated if evaluated is not None else {}
    evaluated.update({n: build_agent(n, spec) for n, spec in names.items() if n not in evaluated})
    return play_suite(
        {n: evaluated[n] for n in names},
        config.games,
        config.matches,
        config.seed,
        config.concurrency,
        config.max_turns,
        out=str(jsonl),
        progress=progress,
        skip=done,
        exact_probs=True,
    )


def _records_in_plan_order(jsonl: Path, planned: list) -> list[MatchRecord]:
    """The planned matches' records from `jsonl`, in plan order; RuntimeError when one is missing."""
    by_id: dict[str, MatchRecord] = {}
    for rec in read_jsonl(jsonl) if jsonl.exists() else []:
        by_id.setdefault(
            rec.match_id, rec
        )  # as the store's read_log: of duplicated ids the first counts
    missing = [p.match_id for p in planned if p.match_id not in by_id]
    if missing:
        raise RuntimeError(f"{jsonl} lacks {len(missing)} stored match(es), e.g. {missing[0]!r}")
    return [by_id[p.match_id] for p in planned]


def _compared(config: EvalConfig) -> dict[str, str]:
    """The agents an analysis covers: the evaluated agent and, when given, the baseline."""
    return {
        AGENT: config.agent,
        **({BASELINE: config.baseline} if config.baseline is not None else {}),
    }


def _stored(db, key: str, evaluated: dict, who: str, spec: str, analyse):
    """`analyse(agent)`'s JSON result for `who`, read from the eval DB's meta table under `key`
    when an earlier run stored it, else computed (building the agent once) and stored; None,
    stored as nothing, when `analyse` returns None."""
    with Store(db) as store:
        cached = store.meta(key)
    if cached is not None:
        return json.loads(cached)
    if who not in evaluated:
        evaluated[who] = build_agent(who, spec)
    result = analyse(evaluated[who])
    if result is not None:
        with Store(db) as store:
            store.set_meta(key, json.dumps(result))
    return result


def exploitability_rows(config: EvalConfig, evaluated: dict, console=None) -> list[dict]:
    """Exploitability of the agent (and baseline) on every game of the config that allows
    it; stored in the eval DB's meta table, so a resumed evaluation does not redo it."""
    db, _ = store_paths(config.out)
    rows = []
    for g in config.games:
        for who, spec in _compared(config).items():

            def analyse(agent, g=g, who=who):
                _say_nash_conv_time(g, console if who == AGENT else None)
                try:
                    with Progress(desc=f"exploitability {g.name} ({who})", unit="states") as bar:
                        return exploitability_row(
                            agent,
                            g.name,
                            g.params,
                            config.samples,
                            config.seed,
                            config.max_states,
                            who,
                            bar,
                        )
                except (
                    ValueError
                ) as e:  # not an OpenSpiel game, too many states, simultaneous moves
                    if console is not None and who == AGENT:
                        console.print(f"exploitability: {g.name} skipped ({e})")
                    return None

            key = f"exploitability|{who}|{g.name}|{json.dumps(g.params, sort_keys=True)}|{config.samples}"
            row = _stored(db, key, evaluated, who, spec, analyse)
            if row is not None:
                rows.append(row)
    return rows


def _say_nash_conv_time(g: EvalGame, console) -> None:
    """Print OpenSpiel's NashConv time for `g` (`nash_conv_seconds`) when it is over 10 s."""
    game = getattr(games.make(g.name, **g.params), "game", None)
    if console is None or game is None or not hasattr(game, "get_type"):
        return
    seconds = nash_conv_seconds(game)
    if seconds > 10:
        console.print(
            f"exploitability: {g.name} NashConv takes {duration(seconds)} beyond the policy queries"
        )


def perfect_play_rows(config: EvalConfig, evaluated: dict, console=None) -> list[dict]:
    """The tree walk of `evaluation.perfect_play` for the agent (and baseline), both seats, on
    every game of the config the solver searches to the end; stored in the eval DB's meta
    table like the exploitability, so a resumed evaluation does not redo it."""
    db, _ = store_paths(config.out)
    rows = []
    for g in config.games:
        if not solvable(g.name, g.params):
            if console is not None:
                console.print(
                    f"perfect play: {g.name} skipped (the solver cannot search it to the end)"
                )
            continue
        for who, spec in _compared(config).items():

            def analyse(agent, g=g, who=who):
                return analysis_perfect_play_rows(agent, g.name, g.params, who)

            key = f"perfect_play|{who}|{g.name}|{json.dumps(g.params, sort_keys=True)}"
            rows += _stored(db, key, evaluated, who, spec, analyse)
    return rows


def evaluate_and_report(
    config: EvalConfig, notes: Sequence[str] = (), ray_pool: Callable | None = None
) -> None:
    """`arena eval` on a settled config: play (or resume) the evaluation, then print its report
    and write DIR/eval.json and DIR/eval.html.

    Args:
        config: the evaluation, its games' parameters settled (`with_params`) and its specs
            checked (`check_specs`).
        notes: lines that say what was chosen for the user, printed first.
        ray_pool: `ray_pool(build)` -> an `arena.ray_runner.RayPool` to play the matches on
            (`run_eval`); None: here.
    """
    console = make_console()
    for line in notes:
        console.print(line, markup=False)
    db, jsonl = store_paths(config.out)
    console.print(
        f"evaluating {config.agent}"
        + (f" against baseline {config.baseline}" if config.baseline is not None else "")
        + f" on {', '.join(f'{g.name} vs {len(g.opponents)} opponent(s)' for g in config.games)}; store {db}"
    )
    evaluated: dict = {}
    planned = sum(
        len(plans(w, config.games, config.matches, config.seed))
        for w in (AGENT, BASELINE)[: 1 + (config.baseline is not None)]
    )
    try:
        with Progress(total=planned, desc="eval") as bar:
            run = run_eval(config, bar, evaluated, ray_pool)
    except KeyboardInterrupt:  # Ctrl-C: say what is kept and how to go on (cli.main prints it)
        raise KeyboardInterrupt(kept_on_interrupt(db)) from None
    if run.recovered:
        console.print(
            f"recovered {run.recovered} match(es) from {jsonl} that the store had not recorded"
        )
    console.print(
        f"{run.played} match(es) played now, {len(run.records)} in all, {run.seconds:.1f} s"
    )
    rows = as_rows(cells(run.records, AGENT))
    if config.baseline is not None:
        rows += as_rows(cells(run.records, BASELINE)) + as_rows(
            paired(run.records, AGENT, BASELINE, config.seed)
        )
    rows += extra_rows(config, run.records)
    if config.exploitability:
        rows += exploitability_rows(config, evaluated, console)
    if config.perfect_play:
        rows += perfect_play_rows(config, evaluated, console)
    out = Path(config.out)
    print_report(rows, console)
    write_json(rows, out / "eval.json")
    subtitle = (
        f"agent {config.agent}"
        + (f" · baseline {config.baseline}" if config.baseline is not None else "")
        + f" · {config.matches} matches per game and opponent · seed {config.seed}"
    )
    write_html(rows, out / "eval.html", "evaluation", subtitle)
    console.print(f"results: {out / 'eval.json'}, {out / 'eval.html'}; trajectories: {jsonl}")


def with_params(config: EvalConfig, flags: list[str] | None) -> tuple[EvalConfig, list[str]]:
    """`config` with every game's parameters settled, and a line for each choice made for the user.

    Per game, the later wins: the params a training checkpoint among the evaluated agents
    trained the game with (the agent's, else the baseline's; read from its saved config,
    `agents.trained_games`), the game's own `params:` (a config), then the `--param` flags:
    `KEY=VALUE` for every game that has parameter KEY, `GAME.KEY=VALUE` for that game alone.
    ValueError (one line) for a flag no game of the evaluation takes, a GAME it does not play,
    or a value a game refuses.
    """
    notes = []
    trained: dict[str, tuple[str, dict]] = {}  # game -> (agent spec, params it trained with)
    for spec in (config.agent, config.baseline):
        for game, params in trained_games(spec) or []:
            trained.setdefault(game, (spec, params))
    out = []
    for g in config.games:
        spec, params = trained.get(g.name, (None, {}))
        taken = {k: v for k, v in params.items() if k not in g.params}
        if taken:
            notes.append(
                f"{g.name}: {', '.join(f'{k}={v}' for k, v in taken.items())}, as {spec} trained it "
                f"(--param {g.name}.KEY=VALUE to change)"
            )
        out.append(replace(g, params={**params, **g.params}))
    names = [g.name for g in out]
    for key, value in key_values(flags, "--param"):
        game, dot, leaf = key.partition(".")
        if dot:
            if game not in names:
                raise ValueError(
                    f"--param {key}: this evaluation plays no {game} (its games: {', '.join(names)})"
                )
            out = [
                replace(g, params={**g.params, leaf: value}) if g.name == game else g for g in out
            ]
            continue
        takers, refusals = [], []
        for g in out:
            try:
                games.make(g.name, **{**g.params, key: value})
                takers.append(g.name)
            except games.UnknownParameter as e:
                refusals.append(str(e))
        if not takers:
            raise ValueError(refusals[0])
        if refusals:
            notes.append(
                f"--param {key}={value}: for {', '.join(takers)} only "
                f"({', '.join(n for n in names if n not in takers)} has no parameter {key!r})"
            )
        out = [replace(g, params={**g.params, key: value}) if g.name in takers else g for g in out]
    for g in out:
        games.make(g.name, **g.params)
    return replace(config, games=out), notes


def extra_rows(config: EvalConfig, records: list[MatchRecord]) -> list[dict]:
    """Blunder rows (games an exact solver handles), social rows (dilemmas, negotiation) and the
    rows of Trust-and-Split's messages, the commons, Werewolf and codewords."""
    who = [AGENT] + ([BASELINE] if config.baseline is not None else [])
    rows = (blunder_rows, social_rows, messages_rows, commons_rows, werewolf_rows, codewords_rows)
    return [asdict(r) for rows_of in rows for w in who for r in rows_of(records, w)]
