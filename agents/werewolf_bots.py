"""A scripted Werewolf player for every role: `werewolf_heuristic`.

The bot reads only what its player may know (`Werewolf.seen`, `Werewolf.known`: its role, its
fellow werewolves, its findings, the public messages and votes) and draws its random choices
from the turn's per-match generator, so a match replays exactly from its seed.

Messages (one per discussion turn):

    seer        "I am the seer. player_2 is a werewolf. player_4 is not a werewolf." (every
                finding so far; with `reveal=False` it says "I am a villager." and nothing else,
                though it still votes on what it found)
    village     "I am a villager." plus "I suspect player_k." when it has a suspect (below)
    werewolf    "I am a villager." plus "I suspect player_k." naming a non-werewolf (below)

Choices:

    village vote    in order: a living player it knows is a werewolf (the seer's own finding,
                    never its own seat), a player who called it a werewolf (a liar: it knows
                    its own role), the latest living player a message called a werewolf
                    ("player_k is a werewolf"), the most accused today ("I suspect player_k",
                    ties drawn at random), else a random living other player that no message
                    cleared ("player_k is not a werewolf") and that did not say it is the seer
    werewolf vote   a living self-declared seer who is not a werewolf, else the most accused
                    living non-werewolf, else a random one: never a fellow werewolf
    werewolf night  the pick an earlier werewolf made tonight, else a living self-declared
                    seer, else a random living non-werewolf
    seer night      a random living player it has not inspected yet (else any living other)
    doctor night    the latest living self-declared seer, else itself

The bot plays Werewolf only: asked to play another game it raises `WrongGame` (one line)
before any match starts (`check_game`) or at its first turn.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import games
from agents.base import PendingTurn, WrongGame, decision
from core.records import TurnRecord

CLAIM = re.compile(r"\bplayer_(\d+) is (not )?a werewolf\b", re.I)
SUSPECT = re.compile(r"\bI suspect player_(\d+)\b", re.I)
SEER_CLAIM = re.compile(r"\bI am the seer\b", re.I)


@dataclass
class Evidence:
    """What one player read in the public messages, by seat."""

    wolf_claims: list[tuple[int, int]]  # (speaker, named werewolf), in order
    cleared: set[int]  # named "not a werewolf"
    seer_claims: list[int]  # speakers who said "I am the seer", in order
    accused_today: Counter  # seat -> "I suspect" mentions in today's messages


def evidence(env, agent: str) -> Evidence:
    """The claims and accusations in the messages `agent` has read."""
    found = Evidence([], set(), [], Counter())
    for e in env.seen(agent):
        if e.kind != "message":
            continue
        for seat, negated in CLAIM.findall(e.text):
            if negated:
                found.cleared.add(int(seat))
            else:
                found.wolf_claims.append((e.actor, int(seat)))
        if SEER_CLAIM.search(e.text):
            found.seer_claims.append(e.actor)
        if e.day == env.day:
            found.accused_today.update(int(s) for s in SUSPECT.findall(e.text))
    return found


def _most(counts: Counter, allowed: list[int], rng) -> int | None:
    """The most counted of `allowed` (ties drawn with `rng`), None if none is counted."""
    counted = {s: counts[s] for s in allowed if counts[s] > 0}
    if not counted:
        return None
    top = max(counted.values())
    tied = sorted(s for s, c in counted.items() if c == top)
    return tied[int(rng.integers(len(tied)))]


def village_suspect(env, agent: str, rng=None) -> int | None:
    """The seat a village player votes for (module docstring); None when only chance is left
    (or, without `rng`, when the most accused are tied)."""
    me = env.possible_agents.index(agent)
    others = [s for s in env.living() if s != me]
    known, ev = env.known(agent), evidence(env, agent)
    for s in others:
        if known.get(s):
            return s
    liars = [who for who, seat in ev.wolf_claims if seat == me and who in others]
    if liars:
        return liars[-1]
    claimed = [
        seat for who, seat in ev.wolf_claims if seat in others and known.get(seat) is not False
    ]
    if claimed:
        return claimed[-1]
    if rng is None:
        top = ev.accused_today.most_common(2)
        if top and top[0][0] in others and (len(top) < 2 or top[1][1] < top[0][1]):
            return top[0][0]
        return None
    return _most(ev.accused_today, others, rng)


def wolf_suspect(env, agent: str, rng=None) -> int | None:
    """The non-werewolf a werewolf votes for or accuses: a self-declared seer, else the most
    accused; None when only chance is left."""
    wolves = env.wolves()
    targets = [s for s in env.living() if s not in wolves]
    ev = evidence(env, agent)
    seers = [s for s in ev.seer_claims if s in targets]
    if seers:
        return seers[-1]
    if rng is None:
        return None
    return _most(ev.accused_today, targets, rng)


def message(env, agent: str, reveal: bool = True) -> str:
    """The bot's discussion message (module docstring)."""
    me = env.possible_agents.index(agent)
    role = env.role_of[me]
    if role == "seer":
        found = [e for e in env.seen(agent) if e.kind == "inspect"]
        return (
            "I am the seer. "
            + " ".join(f"player_{e.target} is {'' if e.flag else 'not '}a werewolf." for e in found)
            if reveal
            else "I am a villager."
        )
    suspect = wolf_suspect(env, agent) if role == "werewolf" else village_suspect(env, agent)
    return "I am a villager." + (f" I suspect player_{suspect}." if suspect is not None else "")


def choose(env, agent: str, rng) -> int:
    """The bot's night action or vote (module docstring): an action of `env.legal_actions`."""
    legal = env.legal_actions(agent)
    me = env.possible_agents.index(agent)
    phase = env.phase
    if phase == "wolves":
        earlier = [e.target for e in env.seen(agent) if e.kind == "pick" and e.day == env.day]
        seers = [s for s in evidence(env, agent).seer_claims if s in legal]
        pick = earlier[0] if earlier else seers[-1] if seers else None
    elif phase == "seer":
        inspected = {e.target for e in env.seen(agent) if e.kind == "inspect"}
        fresh = [s for s in legal if s not in inspected]
        pick = fresh[int(rng.integers(len(fresh)))] if fresh else None
    elif phase == "doctor":
        seers = [s for s in evidence(env, agent).seer_claims if s in legal]
        pick = seers[-1] if seers else me
    elif env.role_of[me] == "werewolf":
        pick = wolf_suspect(env, agent, rng)
        legal = [s for s in legal if s not in env.wolves() and s != env.ABSTAIN]
    else:
        pick = village_suspect(env, agent, rng)
        ev = evidence(env, agent)
        trusted = ev.cleared | set(ev.seer_claims)
        unknown = [s for s in legal if s != env.ABSTAIN and s not in trusted]
        legal = unknown or [s for s in legal if s != env.ABSTAIN]
    if pick is None or pick not in legal:
        pick = legal[int(rng.integers(len(legal)))]
    return pick


@dataclass
class WerewolfBot:
    """An `Agent` that plays every Werewolf role by the heuristics of the module docstring."""

    name: str = "werewolf_heuristic"
    reveal: bool = True  # the seer says what it found

    def check_game(self, game_name: str, params: dict) -> None:
        """WrongGame (one line) for any game but Werewolf (before any match starts)."""
        env = games.make(game_name, **params)
        if getattr(env, "unwrapped", env).metadata.get("name") != "werewolf":
            raise WrongGame(_refusal(self.name, game_name))

    def act(self, turns: list[PendingTurn]) -> list[TurnRecord]:
        return [self._decide(t) for t in turns]

    def _decide(self, turn: PendingTurn) -> TurnRecord:
        env = getattr(turn.env, "unwrapped", turn.env)
        if env.metadata.get("name") != "werewolf":
            raise WrongGame(_refusal(self.name, env.metadata.get("name", type(env).__name__)))
        if env.is_free_text(turn.player):
            return decision(turn, self.name, message(env, turn.player, self.reveal))
        return decision(turn, self.name, choose(env, turn.player, turn.rng))

    def end_match(self, match_id: str) -> None:
        pass


def _refusal(name: str, game: str) -> str:
    return f"werewolf bot {name!r} cannot play {game!r}: it plays werewolf only"


# Agent factories by name, as `agents.make_agent` calls them: WEREWOLF_BOTS[name](agent_name, **options).
WEREWOLF_BOTS = {"werewolf_heuristic": WerewolfBot}
