"""Play in the browser: a person takes one seat of any game, agents take the others.

A game is played by the arena's own runner (`arena.runner.play`), so its record is the same
as any match's. The person's seat is a `BrowserSeat`: an agent whose `act` publishes the
seat's `TextView` and waits for the browser's move. A move from the browser is checked
against that view before the game goes on (`Game.move`): a move that is not one of the
legal moves, or a message that is empty or longer than the view's `max_chars`, raises
`BadMove` and changes nothing. The opponents' turns are played in the game's own thread by
their agents (`agents.make_agent`).

What the browser gets (`Game.state`) is only what the person's seat may see: its own
`TextView` (rules, state, history, legal moves) and, at the end, that seat's view of the
final state and its return. Never the env, the record, or another seat's view.

A finished game is appended (and fsynced, `core.records.append_jsonl`) to
RUNS_DIR/web-play/matches.jsonl as the runner yields it, one game at a time; a killed server loses no
finished game. A game played *into a tournament* (`Setup.tournament`, a store under RUNS_DIR)
takes its opponents by player name from the tournament's stored config (their specs), plays one
of its games with its params, names the person's seat `Setup.player`, and is appended to the
tournament's people file too (`tournaments.people`: rated with its players). `Games` bounds
the games live at once (`max_games`) and drops a game left idle for `idle_s` seconds (its
thread ends; nothing is recorded for it).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import agents
import games
from agents.base import PendingTurn, decision
from agents.by_game import build_agent, check_player
from arena.runner import AgentFailed, MatchPlan, play
from core.records import MatchRecord, TurnRecord, append_jsonl, check_jsonl_out
from tournaments.people import seat_in
from web.paths import OutsideRoot, inside, is_tournament

PLAYER = "human"  # the agent name of the person's seat in the record
FOLDER = "web-play"  # under RUNS_DIR: matches.jsonl holds every finished game
WAIT_S = 20.0  # the most a move request waits for the person's next turn


class BadMove(ValueError):
    """A move the person's seat cannot play now (an HTTP 400)."""


class Full(ValueError):
    """`max_games` games are in play already."""


class Dropped(RuntimeError):
    """The game was dropped (idle, or the server closes) while waiting for a move."""


@dataclass
class Setup:
    """What a new game is: the game, the person's seat (0-based) and the others' agent specs."""

    game: str
    seat: int
    opponents: list[str]  # one spec per other seat, in seat order (the last repeats)
    params: dict = field(default_factory=dict)
    seed: int | None = None
    tournament: str = ""  # a tournament store under RUNS_DIR to play into: rated with its players
    player: str = PLAYER  # the person's name in the record (and on that tournament's leaderboard)


class BrowserSeat:
    """The person's seat as an agent: `act` waits for the move the browser sends."""

    def __init__(self, game: Game) -> None:
        self.name = game.person
        self.game = game

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        return [self.game.ask(turn) for turn in turns]


class Game:
    """One game in play: its thread, the seat's pending view, and the finished record."""

    def __init__(
        self,
        setup: Setup,
        seats: list[str],
        opponents: dict[str, Any],
        out: Path,
        write_lock: threading.Lock,
        also: Path | None = None,
    ) -> None:
        self.id = secrets.token_hex(8)
        self.person = setup.player
        self.setup = setup
        self.match_id = f"web-{time.strftime('%Y%m%d-%H%M%S')}-{self.id[:6]}"
        self.seed = setup.seed if setup.seed is not None else secrets.randbelow(2**31)
        self.last_seen = time.monotonic()
        self.cond = threading.Condition()
        self.turn: PendingTurn | None = None  # the seat's decision waiting for the browser
        self.view = None  # its TextView
        self.answer: TurnRecord | None = None
        self.env = None  # the env of the seat's decisions: read only by the game thread
        self.shown: dict | None = None  # the seat's last view without moves (then, at the end)
        self.record: MatchRecord | None = None
        self.error: str | None = None
        self.dropped = False
        self.moves = 0  # the person's moves so far
        seats = list(seats)  # the agent names of the other seats, in seat order
        seats.insert(setup.seat, self.person)
        self.plan = MatchPlan(self.match_id, setup.game, seats, self.seed, dict(setup.params))
        self.agents = {**opponents, self.person: BrowserSeat(self)}
        self.out, self.also, self.write_lock = out, also, write_lock
        self.seat = games.make(setup.game, **setup.params).possible_agents[setup.seat]
        self.thread = threading.Thread(target=self._run, name=f"web-play-{self.id}", daemon=True)

    def _run(self) -> None:
        try:
            for record in play([self.plan], self.agents, concurrency=1):
                with self.write_lock:  # one line at a time from the games' threads
                    append_jsonl(self.out, record)
                    if self.also is not None:  # the tournament's people file
                        append_jsonl(self.also, record)
                final = _seat_view(self.env, self.seat) if self.env is not None else None
                with self.cond:
                    self.record, self.shown = record, final
        except AgentFailed as e:
            with self.cond:
                self.error = "the game was dropped" if self.dropped else str(e)
        except Exception as e:  # an env or agent error: the page says it, the server goes on
            with self.cond:
                self.error = f"{type(e).__name__}: {e}"
        finally:
            with self.cond:
                self.turn = self.view = None
                self.cond.notify_all()

    # -- the game thread's side ------------------------------------------------------------

    def ask(self, turn: PendingTurn) -> TurnRecord:
        """Publish the seat's view of `turn` and wait for the browser's move."""
        with self.cond:
            self.turn, self.view, self.answer, self.env = (
                turn,
                turn.env.view(turn.player),
                None,
                turn.env,
            )
            self.shown = {**_view_json(self.view), "legal_moves": [], "free_text": False}
            self.cond.notify_all()
            while self.answer is None and not self.dropped:
                self.cond.wait()
            if self.dropped:
                raise Dropped(f"game {self.id} was dropped")
            answer, self.turn, self.view = self.answer, None, None
            self.cond.notify_all()
            return answer

    # -- the browser's side ----------------------------------------------------------------

    def move(self, move: str | None = None, text: str | None = None) -> None:
        """Play `move` (one of the legal moves, as text) or the message `text`; BadMove
        when it is not the seat's turn or the move is not legal there (nothing changes)."""
        with self.cond:
            self.last_seen = time.monotonic()
            turn, view = self.turn, self.view
            if turn is None or view is None:
                raise BadMove("it is not your turn")
            if view.free_text:
                if not isinstance(text, str) or not text.strip():
                    raise BadMove("this turn is a message: write it in the text box")
                if len(text) > view.max_chars:
                    raise BadMove(f"a message is at most {view.max_chars} characters")
                action: Any = turn.env.parse(turn.player, text)
                record = decision(turn, self.person, action, move=action)
            else:
                if move not in view.legal_moves:
                    raise BadMove(
                        f"{move!r} is not a legal move now (legal: {', '.join(view.legal_moves)})"
                    )
                action = view.actions[view.legal_moves.index(move)]
                record = decision(turn, self.person, action, move=move)
            self.answer = record
            self.moves += 1
            self.cond.notify_all()

    def wait(self, timeout: float = WAIT_S) -> None:
        """Wait until it is the seat's turn again, the game is over, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.over and (self.turn is None or self.answer is not None):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(left)

    @property
    def over(self) -> bool:
        return self.record is not None or self.error is not None

    def state(self) -> dict:
        """What the browser may show: the seat's own view, and at the end its result."""
        with self.cond:
            self.last_seen = time.monotonic()
            out = {
                "id": self.id,
                "game": self.setup.game,
                "seat": self.seat,
                "opponents": self.setup.opponents,
                "your_turn": self.view is not None and self.answer is None,
                "over": self.over,
                "moves_played": self.moves,
                "error": self.error,
            }
            if out["your_turn"]:
                out["view"] = _view_json(self.view)
            elif self.shown is not None:  # between turns and at the end: the seat's own view
                out["view"] = self.shown
            if self.record is not None:
                out["match_id"] = self.record.match_id
                out["return"] = self.record.returns.get(self.seat, 0.0)
                out["outcome"] = self.record.outcome.get(self.seat, "")
            return out

    def drop(self) -> None:
        with self.cond:
            self.dropped = True
            self.cond.notify_all()


def _view_json(view) -> dict:
    return {
        "rules": view.rules,
        "state": view.state,
        "history": list(view.history),
        "legal_moves": list(view.legal_moves),
        "free_text": view.free_text,
        "max_chars": view.max_chars,
    }


def _seat_view(env, seat: str) -> dict:
    """The seat's view without moves (not its turn, or the game is over)."""
    try:
        view = {
            "rules": env.rules_text(seat),
            "state": env.state_text(seat),
            "history": list(env.history_text(seat)),
        }
    except Exception:  # a game whose text needs a live decision: show nothing more
        return {
            "rules": "",
            "state": "",
            "history": [],
            "legal_moves": [],
            "free_text": False,
            "max_chars": 0,
        }
    return {**view, "legal_moves": [], "free_text": False, "max_chars": 0}


class Games:
    """The games live at once under one runs folder: at most `max_games`, each dropped
    after `idle_s` seconds without a request."""

    def __init__(self, runs_dir: Path, max_games: int = 8, idle_s: float = 1800.0) -> None:
        self.root = Path(runs_dir).resolve()
        self.out = Path(runs_dir) / FOLDER / "matches.jsonl"
        self.max_games, self.idle_s = max_games, idle_s
        self.live: dict[str, Game] = {}
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()  # the games' appends to `out`

    def start(self, setup: Setup) -> Game:
        """Check `setup`, build the opponents and start the game; ValueError (one line) for a
        bad game, seat or spec, or when `max_games` games are live."""
        also, specs = None, {}
        if setup.tournament:
            setup, also, specs = self._into_tournament(setup)
        seats, opponents = self._opponents(setup, specs)
        check_jsonl_out(str(self.out))
        with self.lock:
            self._sweep()
            if sum(not g.over for g in self.live.values()) >= self.max_games:
                raise Full(
                    f"{self.max_games} games are in play already (--max-games); finish one first"
                )
            game = Game(setup, seats, opponents, self.out, self.write_lock, also)
            self.live[game.id] = game
        game.thread.start()
        return game

    def _into_tournament(self, setup: Setup) -> tuple[Setup, Path, dict]:
        """`setup` for a game into the tournament it names: the game's params from the
        tournament, its opponents the players named (one-line ValueErrors otherwise,
        `tournaments.people.seat_in`); the tournament's people file, and its players' specs."""
        try:
            db = inside(self.root, setup.tournament)
        except OutsideRoot as e:
            raise ValueError(str(e)) from None
        if not is_tournament(db):
            raise ValueError(f"no tournament store {setup.tournament!r} under the runs folder")
        names = [s.strip() for s in setup.opponents if s.strip()]
        seat = seat_in(db, setup.game, setup.player, names)
        return replace(setup, params=seat.params, opponents=names), seat.record, seat.players

    def _opponents(self, setup: Setup, players: dict) -> tuple[list[str], dict[str, Any]]:
        """The agent names of the other seats in seat order, and the agents by name (one
        agent per distinct spec, or tournament player in `players`, playing each seat it is
        given)."""
        if setup.game not in games.names():
            raise ValueError(f"game must be one of {', '.join(games.names())}, got {setup.game!r}")
        seats = len(games.make(setup.game, **setup.params).possible_agents)
        if not 0 <= setup.seat < seats:
            raise ValueError(
                f"seat must be between 0 and {seats - 1} for {setup.game}, got {setup.seat}"
            )
        specs = [s.strip() for s in setup.opponents if s.strip()]
        if not specs:
            raise ValueError("opponents must name at least one agent spec (e.g. random)")
        specs = (specs + [specs[-1]] * seats)[: seats - 1]
        built: dict[str, Any] = {}
        for name in specs:  # a spec, or a tournament's player name
            spec = players.get(name, name)
            if name not in players and (
                spec == PLAYER or agents.parse_spec(spec)["type"] == "human"
            ):
                raise ValueError("opponents must be agents, not human (you are the human)")
            if name not in built:
                check_player(spec, [(setup.game, setup.params)])
                built[name] = build_agent(name, spec)
        return specs, built

    def get(self, game_id: str) -> Game | None:
        with self.lock:
            self._sweep()
            return self.live.get(game_id)

    def _sweep(self) -> None:
        """Forget finished games left idle, and drop games idle past `idle_s`."""
        now = time.monotonic()
        for gid, game in list(self.live.items()):
            if now - game.last_seen > self.idle_s:
                game.drop()
                del self.live[gid]

    def playing(self) -> list[Game]:
        with self.lock:
            self._sweep()
            return [g for g in self.live.values() if not g.over]

    def close(self) -> None:
        with self.lock:
            for game in self.live.values():
                game.drop()
            self.live.clear()
