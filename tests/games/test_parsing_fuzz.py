"""Fuzzing the move parser over every registered game, through each game's own `parse`.

Legal moves come from real states reached by seeded random play (several per game). Each
state gets generated replies: garbage, random Unicode, huge replies, nested tags, signed,
decimal, out-of-range and computed numbers, moves of other games, legal moves wrapped in
junk, and several answers where the last must count. Each reply carries what may come
out: exactly one move, that move or a ParseError, or anything (random input). Every parse
must raise nothing but ParseError, return a legal action, and take < 0.1 s of CPU time.
Run with `-s` to see the figures (inputs, crashes, wrong acceptances, slowest parse).
"""

from __future__ import annotations

import random
import re
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass

import games
from games.parsing import ERROR_KINDS, ParseError, normalize
from tests.games.test_games_api import random_decisions

SEED = 16
STATES_PER_GAME = 6
REPLIES_PER_STATE = 120
MAX_CPU_SECONDS = 0.1
MAX_CHARS = 20_000  # parse_move's default limit

EXPLICIT = ["[{}]", "\\boxed{{{}}}", "<answer>{}</answer>"]
FORMATS = EXPLICIT + [
    "{}",
    "  {}.  ",
    "I'll play {}.",
    "Move: {}",
    "<think>maybe [0]</think> [{}]",
    "<answer>\\boxed{{\\text{{{}}}}}</answer>",
]
# Junk with no digit and no tag or bracket character, even after NFKC: it can neither give a
# number nor open a format, so a legal move in a format wrapped in it must come out as that move.
JUNK = list(" \t\n.,;!?~@$&_|'\"`…—«»¿¡°·•") + [
    "é",
    "ß",
    "ж",
    "中",
    "😀",
    "\u200b",
    "\u0301",
    "ﬁ",
    "\ufdfa",
]
GARBAGE = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
UNICODE = [
    (0x0300, 0x036F),  # combining marks
    (0x0590, 0x06FF),  # Hebrew, Arabic (with Arabic-Indic digits)
    (0x2000, 0x206F),  # spaces, dashes, zero-width, bidi controls
    (0x2150, 0x218F),  # number forms: ½ Ⅳ
    (0x2460, 0x24FF),  # circled digits
    (0x3300, 0x33FF),  # CJK squared words (NFKC expands them)
    (0xD800, 0xDFFF),  # lone surrogates
    (0xFB00, 0xFDFF),  # ligatures, Arabic presentation forms (ﷺ expands 18-fold)
    (0xFF00, 0xFFEF),  # full-width forms
    (0x1F300, 0x1FAFF),  # emoji
    (0x1D400, 0x1D7FF),  # mathematical alphanumerics (NFKC gives ASCII)
]
LOREM = "the a so I think move best because opponent centre corner block win draw maybe hmm then".split()


@dataclass
class Case:
    kind: str  # which generator made it
    reply: str
    expect: str  # "exactly": that move; "only": that move or ParseError; "error": ParseError; "any"
    move: str | None = None


def number_variants(rng: random.Random, n: int) -> list[str]:
    """Numbers that contain `n` but are not `n`: signed, decimal, computed, ordinal, out of range."""
    m = rng.randint(0, 12)
    return [
        f"-{n}",
        f"+{n}",
        f"−{n}",
        f"{n}.5",
        f"0.{n}",
        f".{n}",
        f"{n}.0",
        f"{n},{m}",
        f"{n}%",
        f"{n}**{m}",
        f"{m}**{n}",
        f"{n} x {m}",
        f"{m}+{n}",
        f"{n}/{m}",
        f"{m}:{n}",
        f"{n}th",
        f"{n}e3",
        f"-> {n}",
        f"{n}{n}9",
        f"{n} - {m}",
        "1" + "0" * rng.randint(2, 30),
        f"{n}²",
        f"½{n}",
    ]


def mutate(rng: random.Random, move: str) -> str | None:
    """`move` with one of its numbers made malformed or out of range (still shaped like a move)."""
    numbers = list(re.finditer(r"\d+", move))
    if not numbers:
        return None
    m = rng.choice(numbers)
    bad = rng.choice([f"-{m.group()}", f"{m.group()}.5", "99", f"{m.group()}**2", "1000"])
    return move[: m.start()] + bad + move[m.end() :]


def junk(rng: random.Random, alphabet: list[str], n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def random_unicode(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        lo, hi = rng.choice(UNICODE)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def cases(rng: random.Random, legal: list[str], pool: list[str]) -> list[Case]:
    """REPLIES_PER_STATE generated replies for one state with legal moves `legal`."""
    forms = {normalize(m) for m in legal}

    def literal(core: str) -> Case:  # a reply naming `core`: only `core` itself may come out
        return Case(
            "",
            "",
            "only" if normalize(core) in forms else "error",
            core if normalize(core) in forms else None,
        )

    numbers = [int(m) for m in legal if m.isdigit()] or [rng.randint(0, 13)]
    out: list[Case] = []
    while len(out) < REPLIES_PER_STATE:
        move = rng.choice(legal)
        fmt = rng.choice(FORMATS)
        k = rng.randrange(12)
        if k == 0:  # garbage
            out.append(Case("garbage", junk(rng, GARBAGE, rng.randint(0, 300)), "any"))
        elif k == 1:  # random Unicode, some of it NFKC-expanding or lone surrogates
            out.append(Case("unicode", random_unicode(rng, rng.randint(1, 300)), "any"))
        elif k == 2:  # a legal move in a format, wrapped in junk
            before, after = junk(rng, JUNK, rng.randint(0, 40)), junk(rng, JUNK, rng.randint(0, 40))
            expect = "exactly" if fmt in EXPLICIT else "only"
            out.append(Case("legal in junk", before + fmt.format(move) + after, expect, move))
        elif k == 3:  # a legal move in prose
            words = " ".join(rng.choice(LOREM) for _ in range(rng.randint(0, 30)))
            out.append(
                Case(
                    "legal in prose",
                    f"{words} {rng.choice(EXPLICIT).format(move)} {junk(rng, JUNK, 5)}",
                    "exactly",
                    move,
                )
            )
        elif k == 4:  # signed, decimal, computed, ordinal or out-of-range numbers
            core = rng.choice(number_variants(rng, rng.choice(numbers)))
            case = literal(core)
            out.append(Case("bad number", fmt.format(core), case.expect, case.move))
        elif k == 5:  # a move of another game (or of this game at another state)
            core = rng.choice(pool)
            case = literal(core)
            # Another game's move may hold a one-word move of this one as a whole word (Hanabi's
            # "Hint rank 2 to player_1" names werewolf's "player_1"): the parser may read that
            # move (its rule 5), no other.
            named = [
                m
                for m in legal
                if re.fullmatch(r"[a-z]\w*", normalize(m))
                and re.search(rf"(?<!\w){re.escape(normalize(m))}(?!\w)", normalize(core))
            ]
            if case.expect == "error" and len(named) == 1:
                case = Case("", "", "only", named[0])
            out.append(Case("other game", fmt.format(core), case.expect, case.move))
        elif k == 6:  # several answers: the last one counts, legal or not
            first, bad = rng.choice(EXPLICIT), mutate(rng, move)
            # A bracket not shaped like a move ("[Pass]" in tic-tac-toe) is prose, not an answer.
            last = rng.choice(
                [rng.choice(legal)] + [bad] * bool(bad) + [rng.choice(pool)] * (first != "[{}]")
            )
            case = literal(last)
            reply = (
                first.format(move)
                + " no wait "
                + junk(rng, JUNK, rng.randint(0, 20))
                + first.format(last)
            )
            out.append(Case("last answer", reply, "exactly" if case.move else "error", case.move))
        elif k == 7:  # nested tags around a legal move
            depth = rng.randint(1, 60)
            reply = rng.choice(
                [
                    "<answer>" * depth + move + "</answer>" * rng.randint(1, depth),
                    "\\boxed{" * depth + move + "}" * depth,
                    "\\boxed{" + "\\text{" * depth + move + "}" * depth + "}",
                    "<think>" * depth + "[0]</think>" + f"[{move}]",
                ]
            )
            out.append(Case("nested", reply, "exactly", move))
        elif k == 8:  # unclosed or unbalanced tags: random outcome, but fast and no crash
            parts = [
                "<answer>",
                "</answer>",
                "\\boxed{",
                "\\text{",
                "{",
                "}",
                "[",
                "]",
                "<think>",
                "</think>",
                move,
                " ",
            ]
            out.append(
                Case(
                    "unbalanced",
                    "".join(rng.choice(parts) for _ in range(rng.randint(1, 400))),
                    "any",
                )
            )
        elif (
            k == 9 and rng.random() < 0.25
        ):  # huge replies (a quarter as often: they are slow to make)
            unit = rng.choice(
                [
                    "\\boxed{\\text{",
                    "\\boxed{",
                    "[x]",
                    "<answer>",
                    "-4",
                    "card 4 ",
                    "4 ",
                    "(",
                    "[",
                    "-> ",
                    "\ufdfa",
                    "ﬁ",
                    "1",
                    "1.",
                    " ",
                    junk(rng, GARBAGE, 7),
                    random_unicode(rng, 5),
                ]
            )
            size = rng.choice(
                [MAX_CHARS - len(move) - 2, MAX_CHARS + 1, rng.randint(1000, MAX_CHARS)]
            )
            body = (unit * (size // len(unit) + 1))[:size]
            if (
                len(body) + len(move) + 2 <= MAX_CHARS
                and rng.random() < 0.5
                and unit not in ("\\boxed{\\text{", "\\boxed{", "<answer>", "[", "(", "[x]")
            ):
                out.append(Case("huge + move", body + f"[{move}]", "only", move))
            else:
                out.append(Case("huge", body, "any"))
        elif k == 10:  # a legal move with a number made malformed, in any format
            bad = mutate(rng, move)
            if bad is not None:
                case = literal(bad)
                out.append(Case("malformed move", fmt.format(bad), case.expect, case.move))
        elif k == 11:  # a legal move glued to junk that may join or label its number
            glue = rng.choice(
                ["-", "+", ".", ",", "%", "x", "*", "/", "th", "_", "card ", "round ", "player "]
            )  # not "0": 1 + "0" is 10
            reply = rng.choice(
                [glue + move, move + glue, f"I play {glue}{move}", f"I play {move}{glue} now"]
            )
            out.append(Case("glued", reply, "only", move))
    return out


def check(case: Case, accepted: str | None, reply_error: ParseError | None) -> str | None:
    """Why this outcome is wrong for this case, or None."""
    if accepted is None:
        return "expected " + repr(case.move) if case.expect == "exactly" else None
    if case.expect == "error" or (
        case.expect in ("exactly", "only") and normalize(accepted) != normalize(case.move)
    ):
        return f"accepted {accepted!r}"
    if case.expect == "any":  # random input: the accepted move must at least be spelled out in it
        letters = "".join(
            c for c in unicodedata.normalize("NFKC", case.reply).lower() if c.isalnum()
        )
        if "".join(c for c in normalize(accepted) if c.isalnum()) not in letters:
            return f"accepted {accepted!r}, not in the reply"
    return None


def move_pool() -> list[str]:
    """Legal moves seen at the fuzzed states of every game: the 'moves of other games'."""
    pool = set()
    for name in games.names():
        for env, agent in fuzz_states(name):
            pool.update(env.view(agent).legal_moves)
    return sorted(pool)


def fuzz_states(name: str):
    """(env, agent) at up to STATES_PER_GAME move decisions of seeded random play, spread out."""
    taken = 0
    for turn, (env, agent) in enumerate(random_decisions(name, seeds=range(20))):
        if taken == STATES_PER_GAME:
            return
        if agent is not None and not env.is_free_text(agent) and turn % 3 == 0:
            taken += 1
            yield env, agent


def test_fuzzed_replies_never_crash_never_accept_a_wrong_move_and_parse_fast():
    rng = random.Random(SEED)
    pool = move_pool()
    start = time.perf_counter()
    inputs, crashes, wrong, kinds, slowest = 0, [], [], Counter(), (0.0, 0.0, "", "")
    states = Counter()
    for name in games.names():
        for env, agent in fuzz_states(name):
            states[name] += 1
            view = env.view(agent)
            for case in cases(rng, view.legal_moves, pool):
                inputs += 1
                accepted, error = None, None
                cpu, wall = time.thread_time(), time.perf_counter()
                try:
                    action = env.parse(agent, case.reply)
                except ParseError as e:
                    error = e
                except Exception as e:  # noqa: BLE001 - any other exception is the finding
                    crashes.append((name, case.kind, case.reply[:80], repr(e)))
                    continue
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                if cpu > slowest[0]:
                    slowest = (cpu, wall, name, f"{case.kind} {case.reply[:24]!r}")
                if error is not None:
                    kinds[error.kind] += 1
                    why = (
                        None
                        if error.kind in ERROR_KINDS and "\n" not in error.message
                        else f"bad error {error!r}"
                    )
                elif action not in view.actions:
                    why = f"accepted the action {action!r}, which is not legal"
                else:
                    kinds["accepted"] += 1
                    accepted = view.legal_moves[view.actions.index(action)]
                    why = None
                why = why or check(case, accepted, error)
                if why:
                    wrong.append((name, case.kind, case.reply[:100], why))
    elapsed = time.perf_counter() - start
    findings = Counter(
        why.split(" ")[0] for *_, why in wrong
    )  # "accepted", "expected" (a legal move missed), "bad"
    print(
        f"\nparser fuzz: {inputs} replies over {len(states)} games ({sum(states.values())} states), {elapsed:.1f} s; "
        f"crashes {len(crashes)}, wrong acceptances {findings['accepted']}, legal moves missed {findings['expected']}, "
        f"bad error messages {findings['bad']}; slowest parse {slowest[0] * 1000:.1f} ms CPU "
        f"({slowest[1] * 1000:.1f} ms wall, {slowest[2]}, {slowest[3]}); outcomes {dict(kinds)}"
    )
    for kind, n in Counter(kind for _, kind, _, _ in wrong).most_common():
        print(f"  {kind}: {n} wrong, e.g. {next(w for w in wrong if w[1] == kind)}")
    assert set(states) == set(games.names()) and min(states.values()) == STATES_PER_GAME, states
    assert inputs >= 10_000
    assert not crashes, crashes[:5]
    assert not wrong, wrong[:10]
    assert slowest[0] < MAX_CPU_SECONDS, slowest
