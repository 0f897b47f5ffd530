"""Werewolf: hidden roles, night kills, free-text discussion and a vote, for 5 to 8 players.

The social-deduction party game (Mafia / Werewolf), text-native: a small team of werewolves
who know each other against a village that must find them by talking.

Rules      `num_players` players (5-8, default 6) are dealt hidden roles: `werewolves`
           werewolves (default 2 with 6 or more players, 1 with 5), `seers` seer (1),
           `doctors` doctor (1), villagers the rest. The werewolves are the team "wolves";
           every other role is the team "village". Each player knows its own role; the
           werewolves also know each other. Play alternates night and day, night 1 first.
           Night: each living werewolf in seat order names a victim, a living player who is
           not a werewolf (a werewolf sees the picks made before its own that night). The
           victim is the player named most often; a tie goes to the tied player named first
           (so with two werewolves who disagree, the first werewolf's pick). Then the seer,
           if alive, inspects one living player other than itself and learns, alone,
           whether it is a werewolf. Then the doctor, if alive, protects one living player
           (itself allowed); a protected victim survives.
           Day: the night's death is announced ("nobody died" after a save), with the dead
           player's role when `reveal_roles`. Then `discussion_rounds` rounds of discussion:
           each living player in seat order sends one message that everybody reads. Then
           every living player votes, secretly until all have voted, for a living player
           other than itself, or abstains. The player with the most votes is eliminated
           (role revealed when `reveal_roles`); a tie for the most votes, or no vote at all,
           eliminates nobody. The votes are then public.
           The village wins as soon as no werewolf is alive; the werewolves win as soon as
           they are at least as many as the other living players (checked after each night
           and each vote). If nobody has won after the vote of day `max_days`, the game is a
           draw. Dead players take no more turns.
Moves      night and vote phases: a choice, the move string of a player ("player_3") or
           "abstain" (votes only), parsed like every game's moves (`games.parsing`); the
           legal choices are exactly the targets the rules allow (a werewolf cannot name a
           werewolf, nobody names a dead player, the seer and the voters not themselves).
           Discussion: free text (`is_free_text(agent)` is True; the arena sends the
           message, a `str`, as the action), whitespace runs collapsed to one space (a
           message is one line of the history) and truncated to `max_message_chars`; an
           empty message is "no message".
Action space  `Discrete(num_players + 2)`: 0..n-1 name a player, `n` (ABSTAIN) abstains,
           `n + 1` (SILENT) sends no message, the only masked-in discrete action of a
           discussion turn (so PettingZoo's `api_test` and `seed_test` play the game).
Observation  `{"observation": float32[8 + 2n], "action_mask": int8[n + 2]}`: own role
           one-hot (werewolf, seer, doctor, villager), phase one-hot (night, discussion,
           vote), the day number, alive flags per seat, and per seat what this player knows
           of it: +1 a werewolf, -1 not a werewolf, 0 unknown (itself, its fellow werewolves,
           the seer's findings, roles revealed at death). Messages are in the text layer only.
Rewards    at the end: +1 to every member of the winning team, -1 to every member of the
           other, dead players included; 0 to everybody in a draw (so a team shares its
           place: rankings and mean returns read the team result, and `arena play`'s
           win/draw/loss counts a shared first place as a draw). Illegal action (a choice
           outside the legal ones, a `str` outside a discussion, None): `illegal_reward` to
           the offender, 0 to the others, game over.
State text the phase, the player's name, role and team, the living and the dead (with
           revealed roles), and what its role knows: a werewolf the werewolves and tonight's
           earlier picks, the seer its findings, the doctor its protections. The history
           holds every public event (night deaths, messages with their speakers, each day's
           votes and result) and the player's own private ones (the werewolves' picks and
           chosen victims for werewolves, inspections for the seer, protections for the
           doctor), nothing else.
Dynamics   mixed: sequential night actions and messages, a simultaneous vote (buffered in
           seat order). Not parallelizable. `env.roles` and `env.teams` (agent -> role,
           agent -> "wolves" / "village") are the ground truth of the current match.
Params     num_players=6, werewolves=None (2 with 6+ players, 1 with 5), seers=1 (0 or 1),
           doctors=1 (0 or 1), discussion_rounds=1, max_message_chars=300, max_days=10,
           reveal_roles=True, illegal_reward=-1. `reset(options={"roles": [...]})` deals the
           given roles by seat (for evaluation and tests).
Bots       `werewolf_heuristic` (`agents.werewolf_bots`) plays any role: the seer says what
           it found ("player_2 is a werewolf."), the village votes on a seer claim, then the
           most accused, the werewolves never name or vote for each other.

Playing werewolf

    arena play werewolf --agents werewolf_heuristic random --matches 4
    arena eval --agent random --games werewolf --opponents werewolf_heuristic --matches 12
    arena tournament configs/tournament_werewolf.yaml
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from games.repeated_matrix import int_action
from games.text_env import TextEnv, fold_message

ROLES = ("werewolf", "seer", "doctor", "villager")
WOLVES, VILLAGE = "wolves", "village"
NIGHT = ("wolves", "seer", "doctor")  # the night's phases, in order
PHASES = (*NIGHT, "discussion", "vote")
WON = {VILLAGE: "the village wins", WOLVES: "the werewolves win"}
ROLE_OF_PHASE = {"wolves": "werewolf", "seer": "seer", "doctor": "doctor"}


@dataclass(frozen=True)
class Entry:
    """One event of the match. `seen_by`: the seats that may read it (None: everybody)."""

    kind: str  # pick | victim | inspect | protect | dawn | message | vote | end
    day: int
    seen_by: frozenset[int] | None
    actor: int = -1
    target: int | None = None
    text: str = ""
    flag: bool = False  # inspect: the target is a werewolf
    votes: tuple[tuple[int, int | None], ...] = ()  # vote: (voter, target or None: abstained)
    round: int = 0  # message: the discussion round (0-based)


def team_of(role: str) -> str:
    return WOLVES if role == "werewolf" else VILLAGE


def player_name(seat: int) -> str:
    return f"player_{seat}"


class Werewolf(TextEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "werewolf", "is_parallelizable": False}
    ROLES = ROLES
    TEAMS = (WOLVES, VILLAGE)

    def __init__(
        self,
        num_players: int = 6,
        werewolves: int | None = None,
        seers: int = 1,
        doctors: int = 1,
        discussion_rounds: int = 1,
        max_message_chars: int = 300,
        max_days: int = 10,
        reveal_roles: bool = True,
        render_mode: str | None = None,
        illegal_reward: float = -1.0,
    ):
        super().__init__(render_mode=render_mode, illegal_reward=illegal_reward)
        n = _check_int("num_players", num_players, 5, 8)
        wolves = 1 if werewolves is None and n == 5 else 2 if werewolves is None else werewolves
        self.num_wolves = _check_int("werewolves", wolves, 1, (n - 1) // 2)
        self.num_seers = _check_int("seers", seers, 0, 1)
        self.num_doctors = _check_int("doctors", doctors, 0, 1)
        if self.num_wolves + self.num_seers + self.num_doctors > n:
            raise ValueError(f"werewolves + seers + doctors must be at most num_players={n}")
        self.discussion_rounds = _check_int("discussion_rounds", discussion_rounds, 0, 10)
        self.max_message_chars = _check_int("max_message_chars", max_message_chars, 1, 10_000)
        self.max_days = _check_int("max_days", max_days, 1, 100)
        if not isinstance(reveal_roles, (bool, np.bool_)):
            raise ValueError(f"reveal_roles must be true or false, got {reveal_roles!r}")
        self.reveal_roles = bool(reveal_roles)
        self.n = n
        self.ABSTAIN, self.SILENT = n, n + 1
        self.possible_agents = [player_name(i) for i in range(n)]
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self.deck = (
            ["werewolf"] * self.num_wolves
            + ["seer"] * self.num_seers
            + ["doctor"] * self.num_doctors
            + ["villager"] * (n - self.num_wolves - self.num_seers - self.num_doctors)
        )
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (8 + 2 * n,), np.float32),
                "action_mask": spaces.Box(0, 1, (n + 2,), np.int8),
            }
        )
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(n + 2) for a in self.possible_agents}
        self.role_of: list[str] = list(self.deck)
        self.roles: dict[str, str] = {}
        self.teams: dict[str, str] = {}
        self.alive: list[bool] = [True] * n
        self.log: list[Entry] = []
        self.day, self.round, self.phase = 1, 0, "wolves"
        self.winner: str | None = None
        self._turns: list[int] = []
        self._picks: list[tuple[int, int]] = []  # tonight's (werewolf, victim) in pick order
        self._victim: int | None = None
        self._protected: int | None = None
        self._votes: dict[int, int | None] = {}

    # --- AEC protocol ------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._seed(seed)
        fixed = (options or {}).get("roles")
        if fixed is not None:
            if sorted(fixed) != sorted(self.deck):
                raise ValueError(f"roles must be a permutation of {self.deck}, got {fixed!r}")
            self.role_of = list(fixed)
        else:
            self.role_of = [str(r) for r in self.np_random.permutation(self.deck)]
        self.roles = dict(zip(self.possible_agents, self.role_of))
        self.teams = {a: team_of(r) for a, r in self.roles.items()}
        self.alive = [True] * self.n
        self.log, self.winner = [], None
        self.day, self.round = 1, 0
        self._start_episode()
        self._start_night()

    def _seats(self, role: str | None = None) -> list[int]:
        """Living seats (of `role`), in seat order."""
        return [i for i in range(self.n) if self.alive[i] and role in (None, self.role_of[i])]

    def living(self) -> list[int]:
        """The living seats, in seat order (public)."""
        return self._seats()

    def wolves(self) -> frozenset[int]:
        """The werewolves' seats, living or dead."""
        return frozenset(i for i, r in enumerate(self.role_of) if r == "werewolf")

    def _start_night(self) -> None:
        self._picks, self._victim, self._protected = [], None, None
        self._enter("wolves")

    def _enter(self, phase: str) -> None:
        """Start `phase`; a phase nobody can play (a dead seer) is skipped."""
        self.phase = phase
        self._turns = self._seats(ROLE_OF_PHASE.get(phase))
        if self._turns:
            self.agent_selection = self.possible_agents[self._turns[0]]
        else:
            self._phase_done()

    def _phase_done(self) -> None:
        """Move on after the last turn of the current phase."""
        if self.phase == "wolves":
            self._choose_victim()
            self._enter("seer")
        elif self.phase == "seer":
            self._enter("doctor")
        elif self.phase == "doctor":
            self._dawn()
        elif self.phase == "discussion":
            self.round += 1
            self._discuss()
        else:
            self._count_votes()

    def _discuss(self) -> None:
        """The next discussion round, or the vote once the rounds are over."""
        if self.round < self.discussion_rounds:
            self._enter("discussion")
        else:
            self._votes = {}
            self._enter("vote")

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            return self._was_dead_step(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        i = self._index[agent]
        if self.phase == "discussion":
            if isinstance(action, str):
                text = fold_message(action, self.max_message_chars)
            elif int_action(action, self.n + 2) == self.SILENT:
                text = ""
            else:
                return self._illegal(agent, action)
            self.log.append(Entry("message", self.day, None, i, text=text, round=self.round))
        else:
            a = None if isinstance(action, str) else int_action(action, self.n + 2)
            if a is None or a not in self.legal_actions(agent):
                return self._illegal(agent, action)
            self._choose(i, a)
        self._turns.pop(0)
        if self._turns:
            self.agent_selection = self.possible_agents[self._turns[0]]
        else:
            self._phase_done()
        self._accumulate_rewards()

    def _choose(self, i: int, a: int) -> None:
        """Record seat `i`'s choice `a` in the current night or vote phase."""
        if self.phase == "wolves":
            self._picks.append((i, a))
            self.log.append(Entry("pick", self.day, self.wolves(), i, a))
        elif self.phase == "seer":
            found = self.role_of[a] == "werewolf"
            self.log.append(Entry("inspect", self.day, frozenset({i}), i, a, flag=found))
        elif self.phase == "doctor":
            self._protected = a
            self.log.append(Entry("protect", self.day, frozenset({i}), i, a))
        else:
            self._votes[i] = None if a == self.ABSTAIN else a

    def _choose_victim(self) -> None:
        """The most named player; a tie goes to the tied player named first."""
        counts = Counter(t for _, t in self._picks)
        top = max(counts.values())
        self._victim = next(t for _, t in self._picks if counts[t] == top)
        self.log.append(Entry("victim", self.day, self.wolves(), target=self._victim))

    def _dawn(self) -> None:
        """The night's death, announced; then the win check and the day's discussion."""
        dead = None if self._victim == self._protected else self._victim
        if dead is not None:
            self.alive[dead] = False
        self.log.append(Entry("dawn", self.day, None, target=dead))
        if not self._check_winner():
            self.round = 0
            self._discuss()

    def _count_votes(self) -> None:
        """Eliminate the most-voted player (nobody on a tie); then the win check, the next night or the draw."""
        counts = Counter(t for t in self._votes.values() if t is not None)
        top = max(counts.values(), default=0)
        leaders = [t for t, c in counts.items() if c == top]
        out = leaders[0] if top and len(leaders) == 1 else None
        if out is not None:
            self.alive[out] = False
        votes = tuple(sorted(self._votes.items()))
        self.log.append(Entry("vote", self.day, None, target=out, votes=votes))
        if self._check_winner():
            return
        if self.day >= self.max_days:
            self._finish(None)
        else:
            self.day += 1
            self._start_night()

    def _check_winner(self) -> bool:
        """End the game if a team has won; True if it ended."""
        wolves = len(self._seats("werewolf"))
        if wolves == 0:
            self._finish(VILLAGE)
        elif wolves >= len(self._seats()) - wolves:
            self._finish(WOLVES)
        return self.phase == "over"

    def _finish(self, winner: str | None) -> None:
        self.phase, self.winner = "over", winner
        self.log.append(Entry("end", self.day, None, text=winner or ""))
        rewards = {
            a: 0.0 if winner is None else (1.0 if self.teams[a] == winner else -1.0)
            for a in self.agents
        }
        self._end_episode(rewards)
        for a in self.agents:
            self.infos[a]["winner"] = winner
        self.agent_selection = self.possible_agents[0]

    def _illegal(self, agent: str, action: Any) -> None:
        self.phase = "over"
        super()._illegal(agent, action)

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        i = self._index[agent]
        obs = np.zeros(8 + 2 * self.n, np.float32)
        obs[ROLES.index(self.role_of[i])] = 1.0
        if self.phase != "over":
            obs[4 + max(0, PHASES.index(self.phase) - 2)] = 1.0
        obs[7] = self.day
        obs[8 : 8 + self.n] = self.alive
        for seat, wolf in self.known(agent).items():
            obs[8 + self.n + seat] = 1.0 if wolf else -1.0
        mask = np.zeros(self.n + 2, np.int8)
        mask[self.legal_actions(agent)] = 1
        return {"observation": obs, "action_mask": mask}

    def legal_actions(self, agent: str | None = None) -> list[int]:
        agent = agent or self.agent_selection
        if self._over(agent) or agent != self.agent_selection or self.phase == "over":
            return []
        i = self._index[agent]
        living = self._seats()
        if self.phase == "wolves":
            return [t for t in living if self.role_of[t] != "werewolf"]
        if self.phase == "seer":
            return [t for t in living if t != i]
        if self.phase == "doctor":
            return living
        if self.phase == "discussion":
            return [self.SILENT]
        return [t for t in living if t != i] + [self.ABSTAIN]

    def is_free_text(self, agent: str) -> bool:
        return (
            self.phase == "discussion" and agent == self.agent_selection and not self._over(agent)
        )

    def move_text(self, agent: str, action: Any) -> str:
        if isinstance(action, str):
            return action
        a = int(action)
        return {self.ABSTAIN: "abstain", self.SILENT: "(no message)"}.get(a) or player_name(a)

    # --- what a player knows (the text layer and the scripted bots read it) ----------
    def seen(self, agent: str) -> list[Entry]:
        """The events `agent` may read, in order."""
        i = self._index[agent]
        return [e for e in self.log if e.seen_by is None or i in e.seen_by]

    def known(self, agent: str) -> dict[int, bool]:
        """Seat -> is a werewolf, for every seat whose team `agent` knows: itself, the other
        werewolves (a werewolf), its findings (the seer), the roles revealed at death."""
        i = self._index[agent]
        out = {i: self.role_of[i] == "werewolf"}
        if self.role_of[i] == "werewolf":
            out.update({w: True for w in self.wolves()})
        for e in self.seen(agent):
            if e.kind == "inspect":
                out[e.target] = e.flag
            elif self.reveal_roles and e.kind in ("dawn", "vote") and e.target is not None:
                out[e.target] = self.role_of[e.target] == "werewolf"
        return out

    def revealed(self, agent: str) -> dict[int, str]:
        """Seat -> role of the dead whose roles were announced (`reveal_roles`)."""
        if not self.reveal_roles:
            return {}
        return {
            e.target: self.role_of[e.target]
            for e in self.seen(agent)
            if e.kind in ("dawn", "vote") and e.target is not None
        }

    # --- text layer --------------------------------------------------------------------
    def rules_text(self, agent: str) -> str:
        n, w = self.n, self.num_wolves
        cast = [f"{w} werewol{'ves' if w > 1 else 'f'}"]
        cast += ["1 seer"] * self.num_seers + ["1 doctor"] * self.num_doctors
        villagers = n - w - self.num_seers - self.num_doctors
        cast += [f"{villagers} villager{'s' if villagers != 1 else ''}"] if villagers else []
        shown = " (its role revealed)" if self.reveal_roles else " (its role stays secret)"
        others = ", ".join(a for a in self.possible_agents if a != agent)
        return (
            f"You are {agent} in Werewolf, a social-deduction game with {n} players (the others: {others}).\n"
            f"Hidden roles: {', '.join(cast)}. Each player knows only its own role; the werewolves also know "
            "each other. The werewolves are one team, everybody else is the village.\n"
            "Each night: each living werewolf in turn names a victim (a living player who is not a werewolf; "
            "later werewolves see the earlier picks); the victim is the player named most often, a tie going "
            "to the one named first. The seer inspects one living player and learns, alone, whether it is a "
            "werewolf. The doctor protects one living player (itself allowed); a protected victim survives.\n"
            f"Each day: the night's death is announced{shown}. Then {self.discussion_rounds} round(s) of "
            f"discussion: each living player in seat order sends one message (at most {self.max_message_chars} "
            "characters) that everybody reads. Then every living player votes, secretly until all have voted, "
            "for a living player other than itself, or abstains. The player with the most votes is eliminated"
            f"{shown}; a tie eliminates nobody.\n"
            "The village wins when no werewolf is alive; the werewolves win as soon as they are at least as "
            f"many as the other living players. If nobody has won after day {self.max_days}, it is a draw.\n"
            "Rewards: +1 to each member of the winning team, -1 to each member of the losing team (dead "
            "players included); 0 to everybody in a draw.\n"
            "When choosing a player (a victim, an inspection, a protection, a vote), answer with its name, "
            "e.g. [player_2], or [abstain] when voting. When it is your turn to speak, write just the message."
        )

    def state_text(self, agent: str) -> str:
        i = self._index[agent]
        role = self.role_of[i]
        lines = [self._phase_line(agent), f"You are {agent}, the {role} (team {team_of(role)})."]
        lines += self._private_lines(agent)
        living = [player_name(s) for s in self._seats()]
        lines.append(f"Alive ({len(living)}): {', '.join(living)}.")
        dead = [s for s in range(self.n) if not self.alive[s]]
        if dead:
            roles = self.revealed(agent)
            lines.append(
                "Dead: "
                + ", ".join(player_name(s) + (f" ({roles[s]})" if s in roles else "") for s in dead)
                + "."
            )
        if self.phase != "over" and agent == self.agent_selection and not self._over(agent):
            lines.append(self._prompt_line(i))
        return "\n".join(lines)

    def _phase_line(self, agent: str) -> str:
        """Where the game is, as everybody may know it (the night's order stays hidden)."""
        if self.phase == "over":
            if "illegal_move" in self.infos.get(agent, {}):
                return f"The game ended early after an illegal move, on day {self.day}."
            if self.winner is None:
                return f"The game is over: a draw after day {self.day}."
            return f"The game is over: {WON[self.winner]}."
        if self.phase in NIGHT:
            return f"Night {self.day}."
        if self.phase == "discussion":
            return f"Day {self.day}, discussion round {self.round + 1} of {self.discussion_rounds}."
        return f"Day {self.day}, vote."

    def _private_lines(self, agent: str) -> list[str]:
        """What `agent`'s role knows beyond the public record."""
        i = self._index[agent]
        role, lines = self.role_of[i], []
        if not self.alive[i]:
            lines.append("You are dead: you take no more turns.")
        if role == "werewolf":
            pack = ", ".join(
                player_name(w) + ("" if self.alive[w] else " (dead)") for w in sorted(self.wolves())
            )
            lines.append(f"The werewolves: {pack}.")
        elif role == "seer":
            found = [e for e in self.seen(agent) if e.kind == "inspect"]
            if found:
                lines.append(
                    "Your findings: "
                    + "; ".join(
                        f"{player_name(e.target)} is {'' if e.flag else 'not '}a werewolf"
                        for e in found
                    )
                    + "."
                )
        elif role == "doctor":
            saved = [e for e in self.seen(agent) if e.kind == "protect"]
            if saved:
                lines.append(
                    "You protected: "
                    + ", ".join(f"{player_name(e.target)} (night {e.day})" for e in saved)
                    + "."
                )
        return lines

    def _prompt_line(self, i: int) -> str:
        """What the player to move is asked."""
        if self.phase == "wolves":
            earlier = ", ".join(f"{player_name(w)} named {player_name(t)}" for w, t in self._picks)
            before = f" Tonight so far: {earlier}." if earlier else ""
            return f"Choose tonight's victim: a living player who is not a werewolf.{before}"
        if self.phase == "seer":
            return "Choose a living player to inspect."
        if self.phase == "doctor":
            return "Choose a living player to protect tonight (yourself allowed)."
        if self.phase == "discussion":
            return "Write your message to the other players."
        return "Vote for the living player to eliminate, or abstain."

    def history_text(self, agent: str) -> list[str]:
        return [self.describe(e) for e in self.seen(agent)]

    def describe(self, e: Entry) -> str:
        """One event as a line of the history."""
        day, who, whom = e.day, player_name(e.actor), player_name(e.target or 0)
        if e.kind == "pick":
            return f"Night {day}: werewolf {who} named {whom} as the victim."
        if e.kind == "victim":
            return f"Night {day}: the werewolves' victim is {whom}."
        if e.kind == "inspect":
            return f"Night {day}: you inspected {whom}: {'a werewolf' if e.flag else 'not a werewolf'}."
        if e.kind == "protect":
            return f"Night {day}: you protected {whom}."
        if e.kind == "dawn":
            if e.target is None:
                return f"Day {day}: nobody died in the night."
            return f"Day {day}: {whom} was killed in the night{self._role_note(e.target)}."
        if e.kind == "message":
            where = f"Day {day}" + (f", round {e.round + 1}" if self.discussion_rounds > 1 else "")
            return f'{where}: {who} said: "{e.text}"' if e.text else f"{where}: {who} said nothing."
        if e.kind == "vote":
            return self._describe_vote(e)
        return f"Game over: {WON[e.text]}." if e.text else f"Game over: a draw after day {day}."

    def _describe_vote(self, e: Entry) -> str:
        cast = [
            f"{player_name(s)} {'abstained' if t is None else 'voted ' + player_name(t)}"
            for s, t in e.votes
        ]
        result = (
            "a tie or no votes: nobody is eliminated"
            if e.target is None
            else f"{player_name(e.target)} is eliminated{self._role_note(e.target)}"
        )
        return f"Day {e.day} vote: {', '.join(cast)}; {result}."

    def _role_note(self, seat: int) -> str:
        return f"; {player_name(seat)} was a {self.role_of[seat]}" if self.reveal_roles else ""


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, np.integer))
        or not low <= value <= high
    ):
        raise ValueError(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return int(value)


def env(**params) -> Werewolf:
    return Werewolf(**params)
