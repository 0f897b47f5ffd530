"""The LLM agent: chat prompts from a game's text layer, one backend batch per step.

`LLMAgent(name, backend, config)` implements the `Agent` protocol (`agents.base`). For
every pending turn it reads `env.view(player)` and builds chat messages:

- a system prompt with the game rules (as that player is told them) and the answer format;
- `mode="fresh"` (as SPIRAL): one self-contained user message per move with the history,
  the current state and the legal moves; nothing is remembered between moves;
- `mode="multi_turn"` (as MARS): one growing conversation per (match, player); each new
  turn appends a user message with what happened since the player's last move (the new
  history lines), the current state and the legal moves, and the accepted reply is kept
  as the assistant message. Rejected attempts and their corrections are not kept.
  `end_match(match_id)` drops the match's conversations.

Answer format (`answer_format`): "brackets" (`[4]`, as TextArena), "boxed" (`\\boxed{4}`,
as SPIRAL) or "answer" (`<answer>4</answer>`, as MARS); `reasoning=True` asks the model to
think inside `<think>...</think>` first. Replies are parsed by `env.parse(player, reply)`,
which accepts every format and ignores `<think>` blocks (kept in the record). On
free-text turns (`view.free_text`, e.g. a negotiation message) the reply is the message.

Invalid replies (the parser raised `ParseError`, or the backend returned an error):

1. up to `max_retries` correction rounds: the failed turns get their previous reply and a
   private user message with the parse error (as TextArena) and are re-generated, all in
   one batch per round;
2. then the `fallback`: "forfeit" (as MARS/SPIRAL: the record has `action=None`,
   `valid=False`, `fallback="forfeit"`, and the arena ends the match with this player
   penalised by the env's illegal-move reward) or "random" (a uniformly random legal move
   drawn from the turn's per-match generator; `valid=False`, `fallback="random"`; on a
   free-text turn the message `fallback_message` is sent instead).

Truncated replies (the backend stopped at `max_new_tokens`, `finish_reason="length"`, recorded
on the attempt and the turn): `on_truncated="accept"` (default) parses the reply as it is, so a
move written before the cut is played and a reply cut before its move is invalid;
`on_truncated="invalid"` rejects every truncated reply, move or not. Either way a rejected
truncated reply's error starts with "truncated:" and its correction round (step 1) asks for a
shorter answer. A constrained reply that is a whole legal move is not truncated (only its
end-of-sequence token did not fit).

Every attempt is recorded (`TurnRecord.attempts`, with the error string); the record's
`messages`, `completion`, `token_ids`, `logprobs` and `prompt_token_ids` are those of the
last attempt, i.e. the generation that decided the turn.

`prompt="compact"` drops the rules and the answer instructions: the system prompt is
`system_prompt` alone, the user messages are unchanged (history, state, legal moves):
shorter prompts for a model that needs no rules text.

`prompt="state"` goes further, for Markov games whose state text says everything (e.g.
tic-tac-toe with `board="line"`): the system prompt is `system_prompt` alone and the user
message is the current state only: no history, and no legal-move list when decoding is
constrained to the legal moves anyway. Every prompt then has the same length and layout,
so a tiny model finds each cell at a fixed position (`configs/train_tictactoe_tiny.yaml`).

`constrained=True` passes each turn's legal move strings to the backend as `allowed`, so
the reply is exactly one legal move (free-text turns stay unconstrained). A turn marked
`PendingTurn.explore` (an exploring start, training.restarts) is held to one legal move drawn
uniformly with the completion's seed; its record lists every legal move, so the learner
scores the move under the policy's distribution over all of them.

Batching: `act(turns)` sends all turns in one `backend.generate` call, then one call per
retry round for the turns that failed. A backend with one LoRA adapter per seat
(`TransformersBackend.seat_adapters`: per-role policies) is also told each turn's player.

Seeds: every completion is sampled with its own seed (`SamplingParams.seeds`), a hash of
the agent's `seed`, the match (its id and the seed of the turn's generator, i.e. the
match seed), the player, the player's decision number in the match and the attempt. So a
match replays the same samples wherever and whenever it runs: alone or batched with other
matches, resumed, or on another Ray worker. With `seed` None the match alone seeds it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from agents.backend import Backend, Generation, SamplingParams
from agents.base import PendingTurn, decision
from core.records import Attempt, TurnRecord
from core.typed_config import at_least, check_fields, option
from games.parsing import ParseError
from games.text_env import TextView

MODES = ("fresh", "multi_turn")
PROMPTS = ("full", "compact", "state")
FORMATS = ("brackets", "boxed", "answer")
FALLBACKS = ("forfeit", "random")
ON_TRUNCATED = ("accept", "invalid")

_FORMAT_TEXT = {
    "brackets": "write it in square brackets, e.g. [MOVE]",
    "boxed": "put your final answer within \\boxed{}, e.g. \\boxed{MOVE}",
    "answer": "give your final answer as <answer>MOVE</answer>",
}


@dataclass
class LLMAgentConfig:
    """How an LLM agent prompts, samples and handles invalid replies."""

    mode: str = option("fresh", choices=MODES)
    """"fresh": a self-contained prompt per move (SPIRAL); "multi_turn": one growing conversation per match and player (MARS)."""
    prompt: str = option("full", choices=PROMPTS)
    """"full": the system prompt has the rules and the answer format; "compact": system_prompt alone (user messages unchanged); "state": system_prompt alone and the current state only"""
    answer_format: str = option("brackets", choices=FORMATS)
    """How the model is asked to give its move: "brackets" ([4]), "boxed" (\\boxed{4}) or "answer" (<answer>4</answer>)."""
    reasoning: bool = False
    """Ask the model to think inside <think>...</think> before answering."""
    max_retries: int = option(1, check=at_least(0))
    """Correction rounds after an invalid reply (0 = none, as MARS/SPIRAL; 1 = TextArena's one second chance)."""
    fallback: str = option("forfeit", choices=FALLBACKS)
    """After the retries: "forfeit" (the match ends, this player penalised) or "random" (a random legal move)."""
    fallback_message: str = "I have nothing to add."
    """The message sent by the "random" fallback on a free-text turn."""
    on_truncated: str = option("accept", choices=ON_TRUNCATED)
    """A reply cut at max_new_tokens (finish_reason "length"): "accept" parses it as it is (a move written
    before the cut is played); "invalid" rejects it even when it holds a move. A rejected truncated reply's
    correction round asks for a shorter answer."""
    constrained: bool = False
    """Constrain decoding to the legal move strings (the reply is exactly one legal move)."""
    max_new_tokens: int = option(64, check=at_least(1))
    """Completion tokens per attempt."""
    temperature: float = 0.7
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    seed: int | None = None
    """Sampling seed, mixed with the match's (see the module doc). None: the match's seed alone."""
    system_prompt: str = "You are playing a game. Play to maximise your own reward."
    """First line of the system prompt, before the rules and the answer format."""

    def __post_init__(self):
        check_fields(self)
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"need temperature >= 0 and 0 < top_p <= 1; got {self.temperature}, {self.top_p}"
            )
        if self.reasoning and self.constrained:
            raise ValueError(
                "reasoning and constrained exclude each other: a constrained reply is exactly one legal move"
            )


@dataclass
class _Conversation:
    """A multi-turn conversation of one player in one match."""

    messages: list[dict]
    seen: int = 0  # history lines already shown
    note: str = ""  # said at the start of the next user message


@dataclass
class _Work:
    """One turn being decided."""

    turn: PendingTurn
    view: TextView
    base: list[dict]  # messages of the first attempt
    messages: list[dict]  # messages of the current attempt
    decision: int = 0  # the player's decisions in this match before this one
    attempts: list[Attempt] = field(default_factory=list)
    generation: Generation | None = None
    action: object = None
    ok: bool = False


class LLMAgent:
    """An agent that asks an LLM backend for its moves (see the module docstring)."""

    def __init__(self, name: str, backend: Backend, config: LLMAgentConfig | None = None):
        self.name = name
        self.backend = backend
        self.config = config or LLMAgentConfig()
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._decisions: dict[tuple[str, str], int] = {}  # (match, player) -> decisions so far
        self._calls = 0

    # --- prompts --------------------------------------------------------------------------
    def system_message(self, view: TextView) -> dict:
        c = self.config
        if c.prompt in ("compact", "state"):
            return {"role": "system", "content": c.system_prompt}
        if view.free_text:
            how = "When asked for a message, reply with the message itself."
        elif c.constrained:
            how = "Reply with exactly one legal move and nothing else."
        else:
            how = _FORMAT_TEXT[c.answer_format]
            think = (
                "First think step by step inside <think>...</think>, then choose"
                if c.reasoning
                else "Choose"
            )
            how = f"{think} one legal move and {how}."
        return {
            "role": "system",
            "content": f"{c.system_prompt}\n\nGAME RULES:\n{view.rules}\n\nHOW TO ANSWER:\n{how}",
        }

    def user_message(
        self, view: TextView, history: list[str], since_last: bool, note: str = ""
    ) -> dict:
        parts = [note] if note else []
        if self.config.prompt == "state" and not view.free_text:
            parts.append(view.state)
            if not self.config.constrained:
                parts.append("LEGAL MOVES: " + " ".join(f"[{m}]" for m in view.legal_moves))
            return {"role": "user", "content": "\n\n".join(parts)}
        if history:
            parts.append(
                ("SINCE YOUR LAST MOVE:\n" if since_last else "HISTORY:\n") + "\n".join(history)
            )
        parts.append(f"CURRENT STATE:\n{view.state}")
        if view.free_text:
            parts.append(f"Write your message (at most {view.max_chars} characters).")
        else:
            parts.append("LEGAL MOVES: " + " ".join(f"[{m}]" for m in view.legal_moves))
        return {"role": "user", "content": "\n\n".join(parts)}

    def correction_message(self, view: TextView, error: str) -> dict:
        shorter = " Keep it short." if error.startswith("truncated:") else ""
        if view.free_text:
            text = f"Your message was not accepted ({error}). Write your message again.{shorter}"
        else:
            moves = " ".join(f"[{m}]" for m in view.legal_moves)
            how = "" if self.config.constrained else "; " + _FORMAT_TEXT[self.config.answer_format]
            if shorter:
                shorter = " Keep it short: think less and give your move early."
            text = f"Your reply was not accepted ({error}). Legal moves: {moves}. Reply again with one legal move{how}.{shorter}"
        return {"role": "user", "content": text}

    def _first_messages(self, turn: PendingTurn, view: TextView) -> list[dict]:
        if self.config.mode == "fresh":
            return [
                self.system_message(view),
                self.user_message(view, view.history, since_last=False),
            ]
        key = (turn.match_id, turn.player)
        conv = self._conversations.get(key)
        if conv is None:
            conv = self._conversations[key] = _Conversation([self.system_message(view)])
        first = len(conv.messages) == 1
        new = (
            view.history[conv.seen :] if len(view.history) >= conv.seen else view.history
        )  # else: history was rewritten
        return [*conv.messages, self.user_message(view, new, since_last=not first, note=conv.note)]

    # --- acting ---------------------------------------------------------------------------
    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        work = []
        for t in turns:
            view = t.env.view(t.player)
            base = self._first_messages(t, view)
            key = (t.match_id, t.player)
            self._decisions[key] = self._decisions.get(key, -1) + 1
            work.append(_Work(t, view, base, base, self._decisions[key]))
        pending = list(work)
        for round_ in range(self.config.max_retries + 1):
            if not pending:
                break
            if round_ > 0:
                for w in pending:
                    w.messages = [
                        *w.messages,
                        {"role": "assistant", "content": w.generation.text},
                        self.correction_message(w.view, w.attempts[-1].error),
                    ]
            seeds = [sampling_seed(self.config.seed, w.turn, w.decision, round_) for w in pending]
            gens = self._generate(
                [w.messages for w in pending],
                [w.view for w in pending],
                seeds,
                [w.turn.explore and round_ == 0 for w in pending],
                [w.turn for w in pending],
            )
            for w, g in zip(pending, gens):
                w.generation = g
                w.ok, w.action, error = self._parse(w, g)
                w.attempts.append(
                    Attempt(g.text, list(g.token_ids), list(g.logprobs), error, g.finish_reason)
                )
            pending = [w for w in pending if not w.ok]
        return [self._record(w) for w in work]

    def _generate(
        self,
        conversations: list[list[dict]],
        views: list[TextView],
        seeds: list[int],
        explore: list[bool] | None = None,
        turns: list[PendingTurn] | None = None,
    ) -> list[Generation]:
        c = self.config
        self._calls += 1
        allowed = None
        if c.constrained and any(not v.free_text for v in views):
            allowed = [None if v.free_text else list(v.legal_moves) for v in views]
            for i, v in enumerate(
                views
            ):  # an exploring turn: decoding held to one uniformly drawn legal move
                if explore and explore[i] and not v.free_text:
                    allowed[i] = [
                        v.legal_moves[
                            int(np.random.default_rng(seeds[i]).integers(len(v.legal_moves)))
                        ]
                    ]
        params = SamplingParams(
            max_new_tokens=c.max_new_tokens, temperature=c.temperature, top_p=c.top_p, seeds=seeds
        )
        gens = self.backend.generate(conversations, params, allowed, **self._seats(turns))
        if len(gens) != len(conversations):
            raise RuntimeError(
                f"backend {getattr(self.backend, 'name', '?')} returned {len(gens)} generations for {len(conversations)} conversations"
            )
        return gens

    def _parse(self, w: _Work, g: Generation) -> tuple[bool, object, str | None]:
        if g.finish_reason == "error":
            return False, None, f"backend_error: {(g.error or g.text)[:300]}"
        cut = f"truncated: the reply reached max_new_tokens={self.config.max_new_tokens} before it ended"
        truncated = self._truncated(w, g)
        if truncated and self.config.on_truncated == "invalid":
            return False, None, cut
        try:
            return True, w.turn.env.parse(w.turn.player, g.text or ""), None
        except ParseError as e:
            error = f"{e.kind}: {e.message}"
            return False, None, f"{cut} ({error})" if truncated else error

    def _truncated(self, w: _Work, g: Generation) -> bool:
        """The generation was cut at max_new_tokens; a constrained reply that is a whole legal
        move is complete (only its end-of-sequence token did not fit)."""
        if g.finish_reason != "length":
            return False
        constrained = self.config.constrained and not w.view.free_text
        return not (constrained and g.text.strip() in w.view.legal_moves)

    def _record(self, w: _Work) -> TurnRecord:
        t, view, g, c = w.turn, w.view, w.generation, self.config
        fields = dict(
            messages=[dict(m) for m in w.messages],
            completion=g.text,
            token_ids=list(g.token_ids),
            logprobs=list(g.logprobs),
            prompt_token_ids=list(g.prompt_token_ids),
            retries=len(w.attempts) - 1,
            attempts=w.attempts,
            legal_moves=list(view.legal_moves),
            constrained=c.constrained and not view.free_text,
            explored=t.explore and c.constrained and not view.free_text,
            finish_reason=g.finish_reason,
        )
        note = ""
        if w.ok:
            rec = decision(t, self.name, w.action, valid=True, **fields)
        elif c.fallback == "forfeit":
            rec = decision(t, self.name, None, move="", valid=False, fallback="forfeit", **fields)
        else:
            if view.free_text:
                action = c.fallback_message
            else:
                action = view.actions[int(t.rng.integers(len(view.actions)))]
            rec = decision(t, self.name, action, valid=False, fallback="random", **fields)
            note = (
                f"(Your last reply was not accepted, so {rec.move!r} was played for you at random.)"
            )
        self._remember(t, view, w.base[-1], g.text, note)
        return rec

    def _remember(
        self, turn: PendingTurn, view: TextView, user: dict, reply: str, note: str = ""
    ) -> None:
        """multi_turn: keep this turn's user message and reply in the player's conversation."""
        if self.config.mode == "multi_turn":
            conv = self._conversations[(turn.match_id, turn.player)]
            conv.messages += [user, {"role": "assistant", "content": reply}]
            conv.seen, conv.note = len(view.history), note

    # --- the policy without playing (evaluation.exploitability) -------------------------
    def prompt_messages(self, turn: PendingTurn) -> list[dict]:
        """The chat messages `act` would send for `turn` (its first attempt)."""
        return self._first_messages(turn, turn.env.view(turn.player))

    def reply_for(self, move: str) -> str:
        """The reply that plays `move` in this agent's answer format (`[Bet]`, or `Bet` when constrained)."""
        if self.config.constrained:
            return move
        return {
            "brackets": f"[{move}]",
            "boxed": f"\\boxed{{{move}}}",
            "answer": f"<answer>{move}</answer>",
        }[self.config.answer_format]

    def remember(self, turn: PendingTurn, move: str) -> None:
        """Record that this player answered `reply_for(move)` at `turn`, as `act` would
        (multi_turn: the conversation grows; fresh: nothing), so that a later turn of the
        same match sees the prompt it would have seen after playing `move`."""
        view = turn.env.view(turn.player)
        self._remember(turn, view, self._first_messages(turn, view)[-1], self.reply_for(move))

    def action_probabilities(self, turns: list[PendingTurn]) -> list[dict] | None:
        """The exact move distribution at each turn (env action -> probability), or None
        when it has no closed form here: only constrained decoding on a backend with
        `move_distributions` (transformers) and top_p = 1 gives one."""
        c = self.config
        if not c.constrained or c.top_p < 1 or not hasattr(self.backend, "move_distributions"):
            return None
        views = [t.env.view(t.player) for t in turns]
        if any(v.free_text for v in views):
            return None
        conversations = [self._first_messages(t, v) for t, v in zip(turns, views)]
        probs = self.backend.move_distributions(
            conversations,
            [list(v.legal_moves) for v in views],
            c.temperature,
            **self._seats(turns),
        )
        return [dict(zip(v.actions, p)) for v, p in zip(views, probs)]

    def _seats(self, turns: list[PendingTurn] | None) -> dict:
        """The `players` argument for a backend with one LoRA adapter per seat or game role
        (`TransformersBackend.seat_adapters`: per-role policies): each turn's role in its match
        where the backend has an adapter for it (werewolf's "seer"), else its seat; none for any
        other backend."""
        adapters = getattr(self.backend, "seat_adapters", None)
        if not adapters or turns is None:
            return {}
        roles = [getattr(t.env.unwrapped, "roles", {}).get(t.player) for t in turns]
        return {"players": [r if r in adapters else t.player for r, t in zip(roles, turns)]}

    def end_match(self, match_id: str) -> None:
        for key in [k for k in self._conversations if k[0] == match_id]:
            del self._conversations[key]
        for key in [k for k in self._decisions if k[0] == match_id]:
            del self._decisions[key]


def sampling_seed(seed: int | None, turn: PendingTurn, decision: int, attempt: int) -> int:
    """The seed of one completion: (agent seed, match, player, decision, attempt), see the module doc."""
    seq = getattr(
        turn.rng.bit_generator, "seed_seq", None
    )  # the match's generator: its seed is the match seed
    match_seed = (getattr(seq, "entropy", None), tuple(getattr(seq, "spawn_key", ())))
    return zlib.crc32(
        f"{seed}|{match_seed}|{turn.match_id}|{turn.player}|{decision}|{attempt}".encode()
    )
