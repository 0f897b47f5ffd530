"""Every catalogue game as an OpenEnv environment (`openenv-core`): `arena env-serve GAME`.

A session is one match at a time in which the client plays one seat (or several: a team, or
every seat for self-play) and agent specs play the others (bots, checkpoints, a served model;
every other seat of an N-player game), exactly as the Gymnasium view plays them
(`arena.gym_env.single_agent`, which this wraps):

    reset(seed=S)   match S: the game reset with S and the opponents drawing from their own
                    seeded streams, so the same seed replays the same match (the same chance
                    events and opponent replies for the same moves); a fresh game each time,
                    nothing carried over from the last episode
    step(reply)     the reply text, parsed by the game's own parser; a rejected reply follows
                    `on_bad_reply`: "retry" (nothing is played, the same observation comes
                    back with `parse_error`) or "forfeit" (the game's illegal-move rule)
    state           the episode's id and step count, the match seed, the client's seats

The observation is the seat's text view (`text`: rules, history, state, legal moves; and its
parts `rules`, `state`, `history`) with the game's structured fields (`legal_moves`,
`free_text`, `action_mask`, `turn`: the client's seat to move); the reward is what the seat
accrued since its last step, so an episode's rewards sum to the seat's return (with several
seats: their mean, each seat's in `seat_rewards`). Every finished episode is appended to
`record` (JSONL `MatchRecord`s), which `arena export` and the web viewer read like any match.

Into a tournament: `tournament=DB, player_name=NAME` (`arena env-serve --tournament`) plays
the tournament's game as it plays it against its players (the opponents are player names),
and appends each finished episode to the tournament's people file (`tournaments.people`), so
`arena tournament CONFIG --report-only` ranks NAME, a checkpoint another trainer produced,
among the tournament's players.

    app = create_app("tic_tac_toe", opponents="random")          # a FastAPI app (uvicorn)
    client = GenericEnvClient(base_url="http://127.0.0.1:8000").sync()
    result = client.reset(seed=3); result = client.step({"reply": "[4]"})

The server holds at most `max_sessions` sessions (WebSocket clients) at once; a client that
disconnects, or is killed, has its session closed and its slot freed by the server.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field
from starlette.websockets import WebSocketDisconnect

from arena.gym_env import SingleAgentEnv, single_agent
from tournaments.people import seat_in


class GameAction(Action):
    """The seat's reply: free text, parsed by the game's parser (e.g. "[4]", "Bet")."""

    reply: str = Field(description="the seat's reply, as an LLM would write it")


class GameObservation(Observation):
    """What the seat sees at its turn (or at the end)."""

    text: str = Field(default="", description="the seat's prompt: rules, history, state, moves")
    legal_moves: list[str] = Field(default_factory=list, description="the legal move strings")
    free_text: bool = Field(default=False, description="the seat must write a message")
    action_mask: list[int] = Field(default_factory=list, description="legal action ids (1 = legal)")
    turn: str = Field(default="", description="the seat whose turn it is (the client's)")
    rules: str = Field(default="", description="the game's rules as the seat is told them")
    state: str = Field(default="", description="the current state as the seat sees it")
    history: list[str] = Field(default_factory=list, description="the history the seat has seen")
    parse_error: str | None = Field(default=None, description="why the last reply was rejected")
    seat_rewards: dict[str, float] = Field(
        default_factory=dict, description="with several seats: each one's reward this step"
    )


class GameState(State):
    """The session's episode: its id, steps, match seed and the client's seats."""

    game: str = ""
    seat: str = ""  # the client's first seat
    seats: list[str] = Field(default_factory=list)  # all of the client's seats
    seed: int | None = None


class GameEnvironment(Environment[GameAction, GameObservation, GameState]):
    """One session: a match of `game` with the client in `seat` (see the module doc)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, game: str, seat: Any = 0, opponents: Any = "random", **options):
        super().__init__()
        self.gym: SingleAgentEnv = single_agent(game, seat, opponents, **options)
        self._state = GameState(game=game, seat=self.gym.seat, seats=list(self.gym.mine))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GameObservation:
        obs, info = self.gym.reset(seed=seed)
        self._state = GameState(
            episode_id=episode_id or uuid.uuid4().hex,
            game=self._state.game,
            seat=self.gym.mine[0],
            seats=list(self.gym.mine),
            seed=self.gym.match.plan.seed,
        )
        return self._observation(obs, info, reward=None, done=False)

    def step(
        self, action: GameAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GameObservation:
        obs, reward, terminated, truncated, info = self.gym.step(action.reply)
        self._state.step_count += 1
        return self._observation(obs, info, float(reward), terminated or truncated)

    @property
    def state(self) -> GameState:
        return self._state

    def close(self) -> None:
        self.gym.close()

    def _observation(self, obs: dict, info: dict, reward, done: bool) -> GameObservation:
        return GameObservation(
            text=obs["text"],
            legal_moves=list(info.get("legal_moves", [])),
            free_text=bool(info.get("free_text", False)),
            action_mask=[int(x) for x in obs["action_mask"]],
            turn="" if done else self.gym.seat,
            rules=info.get("rules", ""),
            state=info.get("state", ""),
            history=list(info.get("history", [])),
            parse_error=info.get("parse_error"),
            seat_rewards=dict(info.get("seat_rewards", {})),
            reward=reward,
            done=done,
        )


class QuietDisconnect:
    """ASGI middleware: a WebSocket whose client has gone is not an error. OpenEnv's endpoint
    closes the socket in its `finally` after destroying the session, which raises when the
    client closed it first; uvicorn would print that as a traceback on every disconnect."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def create_app(game: str, max_sessions: int = 16, tournament: str | None = None, **env_options):
    """The FastAPI app of OpenEnv's server for `game` (`env_options`: `GameEnvironment`'s
    seat, opponents, the Gymnasium view's options (on_bad_reply, record, player_name, ...) and
    the game's parameters as keywords, as `arena.single_agent` takes them; with `tournament`
    (a tournament store), into that tournament: `into_tournament`).
    The options are checked once here, so a bad one fails before the server starts."""
    if tournament is not None:
        env_options = into_tournament(tournament, game, env_options)
    GameEnvironment(game, **env_options).close()
    app = create_fastapi_app(
        lambda: GameEnvironment(game, **env_options),
        GameAction,
        GameObservation,
        max_concurrent_envs=max_sessions,
    )
    app.add_middleware(QuietDisconnect)
    return app


def into_tournament(db: str, game: str, options: dict) -> dict:
    """`options` for a session that plays `game` into the tournament of `db` as
    `options["player_name"]` against the players `options["opponents"]` (one name for every
    other seat, or one per seat): the game's params and the players from the tournament, the
    record its people file (`tournaments.people.seat_in`; one-line ValueErrors)."""
    if not Path(db).is_file():
        raise ValueError(f"no tournament store at {db}")
    opponents = options.get("opponents", [])
    names = [opponents] if isinstance(opponents, str) else list(opponents)
    keys = set(options) - {"opponents", "player_name", "seat", "on_bad_reply", "max_turns"}
    if keys or not isinstance(options.get("seat", 0), int | str):
        what = ", ".join(sorted(keys)) or "several seats"
        raise ValueError(
            f"a game into a tournament takes its params and record from it, not {what}"
        )
    seat = seat_in(db, game, options.get("player_name", ""), names)
    return {**options, **seat.params, "record": str(seat.record), "named": seat.players}
