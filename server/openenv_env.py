"""Every catalogue game as an OpenEnv environment (`openenv-core`): `arena env-serve GAME`.

A session is one match at a time in which the client plays one seat and agent specs play the
others (bots, checkpoints, a served model; every other seat of an N-player game), exactly as
the Gymnasium view plays them (`arena.gym_env.single_agent`, which this wraps):

    reset(seed=S)   match S: the game reset with S and the opponents drawing from their own
                    seeded streams, so the same seed replays the same match (the same chance
                    events and opponent replies for the same moves); a fresh game each time,
                    nothing carried over from the last episode
    step(reply)     the reply text, parsed by the game's own parser; a rejected reply follows
                    `on_bad_reply`: "retry" (nothing is played, the same observation comes
                    back with `parse_error`) or "forfeit" (the game's illegal-move rule)
    state           the episode's id and step count, the match seed, the seat

The observation is the seat's text view (`text`: rules, history, state, legal moves; and its
parts `rules`, `state`, `history`) with the game's structured fields (`legal_moves`,
`free_text`, `action_mask`, `turn`: whose turn); the
reward is what the seat accrued since its last step, so an episode's rewards sum to the seat's
return. Every finished episode is appended to `record` (JSONL `MatchRecord`s), which
`arena tournament`, `arena export` and the web viewer read like any match.

    app = create_app("tic_tac_toe", opponents="random")          # a FastAPI app (uvicorn)
    client = GenericEnvClient(base_url="http://127.0.0.1:8000").sync()
    result = client.reset(seed=3); result = client.step({"reply": "[4]"})

The server holds at most `max_sessions` sessions (WebSocket clients) at once; a client that
disconnects, or is killed, has its session closed and its slot freed by the server.
"""

from __future__ import annotations

import uuid
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field
from starlette.websockets import WebSocketDisconnect

from arena.gym_env import SingleAgentEnv, single_agent


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


class GameState(State):
    """The session's episode: its id, steps, match seed and the client's seat."""

    game: str = ""
    seat: str = ""
    seed: int | None = None


class GameEnvironment(Environment[GameAction, GameObservation, GameState]):
    """One session: a match of `game` with the client in `seat` (see the module doc)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, game: str, seat: int | str = 0, opponents: Any = "random", **options):
        super().__init__()
        self.gym: SingleAgentEnv = single_agent(game, seat, opponents, **options)
        self._state = GameState(game=game, seat=self.gym.seat)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GameObservation:
        obs, info = self.gym.reset(seed=seed)
        self._state = GameState(
            episode_id=episode_id or uuid.uuid4().hex,
            game=self._state.game,
            seat=self.gym.seat,
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


def create_app(game: str, max_sessions: int = 16, **env_options):
    """The FastAPI app of OpenEnv's server for `game` (`env_options`: `GameEnvironment`'s
    seat, opponents, the Gymnasium view's options (on_bad_reply, record, ...) and the game's
    parameters as keywords, as `arena.single_agent` takes them).
    The options are checked once here, so a bad one fails before the server starts."""
    GameEnvironment(game, **env_options).close()
    app = create_fastapi_app(
        lambda: GameEnvironment(game, **env_options),
        GameAction,
        GameObservation,
        max_concurrent_envs=max_sessions,
    )
    app.add_middleware(QuietDisconnect)
    return app
