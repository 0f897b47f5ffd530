"""Baseline bots: uniform random, OpenSpiel MCTS, CFR optimal play, a human at the terminal.

All implement the batch `Agent` interface (`agents.base`) by looping over the turns; every
random draw comes from the turn's per-match generator, so seeded runs reproduce exactly.

- `RandomAgent`  a uniformly random legal move (free-text turns: a short fixed message).
- `MCTSAgent`    OpenSpiel's `MCTSBot` (UCT c=2, random-rollout evaluator) on the env's
                 pyspiel state; perfect-information sequential OpenSpiel games only
                 (on hidden-information games MCTS would read the hidden state).
- `MinimaxAgent` OpenSpiel alpha-beta search `depth` plies deep (unset: to the end, which is
                 optimal play), uniformly random among the equally good moves; two-player
                 zero-sum deterministic perfect-information games. `minimax:1` takes an
                 immediate win when there is one, `minimax:2` also blocks one.
- `CFRAgent`     a near-Nash policy for Kuhn and Leduc poker, any number of players whose
                 game tree has at most CFR_MAX_HISTORIES histories (2-4 player Kuhn, 2-player
                 Leduc), from OpenSpiel's C++ CFR+ (`pyspiel.CFRPlusSolver`; `solver=cfr`:
                 vanilla CFR), computed once per game and params and cached as JSON (2-player
                 Leduc: 300 iterations, ~3 s, exploitability ~0.002; 3-player Kuhn: 0.3 s,
                 NashConv ~0.001).
- `HumanAgent`   shows the prompt at the terminal and reads a move (re-asks on errors).
                 At the end of input (stdin closed, Ctrl-D) it forfeits each turn it is
                 asked, recorded like an LLM's forfeit, and says so once.

Limits: a bot that cannot play a game says so before any match starts. `check_game(game,
params)` raises `WrongGame` with one line naming what the bot plays (MCTS: perfect-information
sequential OpenSpiel games; minimax: two-player zero-sum deterministic ones, short enough without
a depth; CFR: Kuhn and Leduc poker with a small enough tree); `agents.check_spec(spec, games)`
calls it for every game a command will play. The same refusal is raised at a turn, should a
match reach one anyway.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import games
from agents.base import PendingTurn, WrongGame, decision
from agents.models import cache_dir
from core.records import Attempt, TurnRecord
from games.parsing import ParseError


class RandomAgent:
    """A uniformly random legal move."""

    def __init__(self, name: str = "random", message: str = "Let's both do well."):
        self.name = name
        self.message = message

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        out = []
        for t in turns:
            if t.env.is_free_text(t.player):
                out.append(decision(t, self.name, self.message))
                continue
            actions = t.env.legal_actions(t.player)
            out.append(decision(t, self.name, actions[int(t.rng.integers(len(actions)))]))
        return out

    def action_probabilities(self, turns: list[PendingTurn]) -> list[dict]:
        """Uniform over the legal moves of each turn (evaluation.exploitability)."""
        return [
            {a: 1.0 / len(acts) for a in acts}
            for acts in (t.env.legal_actions(t.player) for t in turns)
        ]


def openspiel_game(game_name: str, params: dict, bot: str):
    """The pyspiel game under catalogue game `game_name` with `params` (WrongGame for a native game)."""
    game = getattr(games.make(game_name, **params), "game", None)
    if game is None or not hasattr(game, "get_type"):
        raise WrongGame(f"the {bot} bot plays OpenSpiel games only; {game_name} is not one")
    return game


def tree_size(game, limit: int) -> int | None:
    """The number of histories (chance and terminal nodes included) of a pyspiel `game`'s tree,
    or None as soon as there are more than `limit` (the walk stops there)."""
    count, stack = 0, [game.new_initial_state()]
    while stack:
        state = stack.pop()
        count += 1
        if count > limit:
            return None
        if not state.is_terminal():
            stack.extend(state.child(a) for a in state.legal_actions())
    return count


def _pyspiel_state(turn: PendingTurn, bot: str):
    state = getattr(turn.env, "state", None)
    if state is None or not hasattr(state, "legal_actions"):
        raise WrongGame(
            f"the {bot} bot plays OpenSpiel games only; {turn.env.info.name} is not one"
        )
    return state


class MCTSAgent:
    """OpenSpiel MCTS with `simulations` simulations per move."""

    def __init__(
        self, name: str = "mcts", simulations: int = 100, rollouts: int = 1, uct_c: float = 2.0
    ):
        if simulations < 1 or rollouts < 1:
            raise ValueError(
                f"mcts needs at least 1 simulation and 1 rollout, got {simulations} and {rollouts}"
            )
        self.name = name
        self.simulations, self.rollouts, self.uct_c = simulations, rollouts, uct_c

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) unless `game_name` is a perfect-information sequential OpenSpiel game."""
        env = games.make(game_name, **params)
        if getattr(env, "game", None) is None:
            raise WrongGame(f"the mcts bot plays OpenSpiel games only; {game_name} is not one")
        _mcts_check(env, game_name)

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        from open_spiel.python.algorithms import mcts  # start-up time: absl, ml_collections

        out = []
        for t in turns:
            state = _pyspiel_state(t, "mcts")
            _mcts_check(t.env, t.env.info.name)
            seed = int(t.rng.integers(2**31 - 1))
            evaluator = mcts.RandomRolloutEvaluator(self.rollouts, np.random.RandomState(seed))
            bot = mcts.MCTSBot(
                state.get_game(),
                self.uct_c,
                self.simulations,
                evaluator,
                random_state=np.random.RandomState(seed + 1),
            )
            out.append(decision(t, self.name, int(bot.step(state))))
        return out


def _mcts_check(env, game_name: str) -> None:
    if not getattr(env, "perfect_information", False) or getattr(env, "simultaneous", False):
        raise WrongGame(
            f"mcts needs a perfect-information sequential game (tic_tac_toe, connect_four, ...); "
            f"{game_name} is not"
        )


FULL_SEARCH_PLIES = 12  # minimax without a depth only for games this short (tic-tac-toe: 9)


class MinimaxAgent:
    """Alpha-beta search `depth` plies ahead (None: the whole game, for games of at most
    FULL_SEARCH_PLIES plies); random among the best moves."""

    def __init__(self, name: str = "minimax", depth: int | None = None):
        if depth is not None and depth < 1:
            raise ValueError(f"minimax depth must be at least 1, got {depth}")
        self.name, self.depth = name, depth
        self._values: dict[
            tuple[str, str, int], dict[int, float]
        ] = {}  # (game, history, player) -> value of each move

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) unless minimax can search `game_name`: two-player zero-sum
        deterministic perfect-information sequential, and without a depth at most
        FULL_SEARCH_PLIES plies long."""
        self._check(openspiel_game(game_name, params, "minimax"), game_name)

    def _check(self, game, game_name: str) -> None:
        kind = game.get_type()
        if (
            game.num_players() != 2
            or kind.utility != kind.utility.ZERO_SUM
            or kind.chance_mode != kind.chance_mode.DETERMINISTIC
            or kind.information != kind.information.PERFECT_INFORMATION
            or kind.dynamics != kind.dynamics.SEQUENTIAL
        ):
            raise WrongGame(
                "minimax needs a two-player zero-sum deterministic perfect-information game "
                f"(tic_tac_toe, connect_four, ...); {game_name} is not"
            )
        if self.depth is None and game.max_game_length() > FULL_SEARCH_PLIES:
            raise WrongGame(
                f"minimax without a depth searches to the end of the game; {game_name} lasts up to "
                f"{game.max_game_length()} plies, too many to finish: give a depth, e.g. minimax:5"
            )

    def best_actions(self, state) -> list[int]:
        values = self.move_values(state)
        top = max(values.values())
        return [a for a, v in values.items() if v >= top - 1e-9]

    def move_values(self, state) -> dict[int, float]:
        """The searched value of each legal move for the player to move (to the end of the
        game without a depth: the game-theoretic value; evaluation.blunders reads it)."""
        # start-up time: absl, ml_collections
        from open_spiel.python.algorithms.minimax import alpha_beta_search

        player = state.current_player()
        game = state.get_game()
        key = (str(game), state.history_str(), player)  # one agent may play several games
        if key not in self._values:
            self._check(game, game.get_type().short_name)
            depth = self.depth - 1 if self.depth is not None else game.max_game_length()
            # an unfinished line at the depth limit is worth 0 (a draw)
            self._values[key] = {
                a: alpha_beta_search(game, state.child(a), lambda s: 0.0, depth, player)[0]
                for a in state.legal_actions()
            }
        return self._values[key]

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        out = []
        for t in turns:
            best = self.best_actions(_pyspiel_state(t, "minimax"))
            out.append(decision(t, self.name, int(best[int(t.rng.integers(len(best)))])))
        return out

    def action_probabilities(self, turns: list[PendingTurn]) -> list[dict]:
        """Uniform over the best moves (what `act` draws from)."""
        return [
            {a: 1.0 / len(best) for a in best}
            for best in (self.best_actions(_pyspiel_state(t, "minimax")) for t in turns)
        ]


CFR_GAMES = ("kuhn_poker", "leduc_poker")
CFR_MAX_HISTORIES = 20_000
"""the largest tree CFR solves before play (histories): 2-player Leduc has 9,457 (300 CFR+
iterations ~3 s), 4-player Kuhn 7,886 (~6 s); 5-player Kuhn (116,437) and 3-player Leduc are refused"""
SOLVERS = ("cfr+", "cfr")  # pyspiel.CFRPlusSolver, pyspiel.CFRSolver


def cfr_supported() -> str:
    """What CFR solves, in words (the start of its refusals)."""
    return (
        f"cfr solves {' and '.join(CFR_GAMES)} with trees of at most {CFR_MAX_HISTORIES:,} histories "
        "(2-player Leduc, Kuhn with 2 to 4 players: openspiel:kuhn_poker --param players=3)"
    )


def cfr_game(game_name: str, params: dict | None = None):
    """The pyspiel game CFR solves for catalogue game `game_name` with `params`; WrongGame (one
    line, naming what CFR supports) for any other game or a tree over CFR_MAX_HISTORIES."""
    supported = cfr_supported()
    try:
        game = openspiel_game(game_name, dict(params or {}), "cfr")
    except WrongGame:
        raise WrongGame(f"{supported}; {game_name} is not one of them") from None
    short = game.get_type().short_name
    if short not in CFR_GAMES:
        raise WrongGame(f"{supported}; {game_name} is not one of them")
    if tree_size(game, CFR_MAX_HISTORIES) is None:
        raise WrongGame(f"{supported}; {game} has more histories than that")
    return game


def cfr_policy(
    game, iterations: int = 300, solver: str = "cfr+"
) -> dict[str, list[tuple[int, float]]]:
    """info-state string -> [(action, probability)] of the solver's average policy on the pyspiel
    `game` (its params included: 3-player Kuhn is its own table), cached on disk per game string,
    iterations and solver."""
    if game.get_type().short_name not in CFR_GAMES:
        raise WrongGame(f"CFR policies are available for {', '.join(CFR_GAMES)}, not {game}")
    if solver not in SOLVERS:
        raise ValueError(f"cfr solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    key = "".join(c if c.isalnum() or c in "_=" else "_" for c in str(game)).strip("_")
    suffix = "" if solver == "cfr+" else "_vanilla"
    path = (
        cache_dir() / f"cfr_{key}_{iterations}{suffix}.json"
    )  # 2 players: cfr_kuhn_poker_300.json
    if path.exists():
        return {k: [tuple(x) for x in v] for k, v in json.loads(path.read_text()).items()}
    import pyspiel  # start-up time: pyspiel

    run = (pyspiel.CFRPlusSolver if solver == "cfr+" else pyspiel.CFRSolver)(game)
    for _ in range(iterations):
        run.evaluate_and_update_policy()
    policy = run.average_policy()
    table: dict[str, list[tuple[int, float]]] = {}
    stack = [game.new_initial_state()]
    while stack:  # walk the tree once to tabulate every decision's info state
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            key = state.information_state_string()
            table.setdefault(key, [(int(a), float(p)) for a, p in policy.get_state_policy(state)])
        stack.extend(state.child(a) for a in state.legal_actions())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(table))
    tmp.replace(path)
    return table


class CFRAgent:
    """Near-optimal play for Kuhn and Leduc poker (OpenSpiel CFR+ average policy; `solver="cfr"`:
    vanilla CFR's), one table per game and params."""

    def __init__(self, name: str = "cfr", iterations: int = 300, solver: str = "cfr+"):
        if iterations < 1:
            raise ValueError(f"cfr needs at least 1 iteration, got {iterations}")
        if solver not in SOLVERS:
            raise ValueError(f"cfr solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
        self.name, self.iterations, self.solver = name, iterations, solver
        self._tables: dict[str, dict] = {}  # str(pyspiel game), its params included -> table

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) unless CFR solves `game_name` with `params` (`cfr_game`)."""
        cfr_game(game_name, params)

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        out = []
        for t, dist in zip(turns, self.action_probabilities(turns)):
            actions, probs = list(dist), np.asarray(list(dist.values()))
            out.append(decision(t, self.name, int(actions[t.rng.choice(len(actions), p=probs)])))
        return out

    def action_probabilities(self, turns: list[PendingTurn]) -> list[dict]:
        """The solver's average policy at each turn's information state (what `act` draws from)."""
        out = []
        for t in turns:
            state = _pyspiel_state(t, "cfr")
            game = state.get_game()
            key = str(game)
            if key not in self._tables:
                if tree_size(game, CFR_MAX_HISTORIES) is None:
                    raise WrongGame(f"{cfr_supported()}; {game} has more histories than that")
                self._tables[key] = cfr_policy(game, self.iterations, self.solver)
            player = t.env.possible_agents.index(t.player)
            actions, probs = zip(*self._tables[key][state.information_state_string(player)])
            probs = np.asarray(probs) / np.sum(probs)
            out.append({int(a): float(p) for a, p in zip(actions, probs)})
        return out


class HumanAgent:
    """A person at the terminal: sees the prompt, types a move (or a message)."""

    def __init__(self, name: str = "human", input_fn=input, print_fn=print):
        self.name, self.input, self.print = name, input_fn, print_fn
        self.closed = False  # input ended: every later turn is forfeited

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        out = []
        for t in turns:
            if not self.closed:
                view = t.env.view(t.player)
                self.print(f"\n=== {t.match_id} - you are {t.player} ===\n{view.prompt()}")
            while not self.closed:
                try:
                    reply = self.input("your move> ")
                except EOFError:
                    self.closed = True
                    print(
                        f"{self.name}: end of input (stdin closed): forfeiting this and every later turn",
                        file=sys.stderr,
                    )
                    break
                try:
                    action = t.env.parse(t.player, reply)
                    break
                except ParseError as e:
                    self.print(f"  not accepted ({e.kind}): {e.message}")
            if self.closed:
                out.append(
                    decision(
                        t,
                        self.name,
                        None,
                        move="",
                        valid=False,
                        fallback="forfeit",
                        attempts=[Attempt("", error="eof: end of input, no move typed")],
                    )
                )
            else:
                out.append(decision(t, self.name, action, completion=reply))
        return out
