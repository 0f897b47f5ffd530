"""Turn a model's reply into exactly one legal move, or say why not.

The one place that parses moves. Models answer in many styles; we accept, in order of
precedence (the first style present decides):

1. `<answer>MOVE</answer>`     the last answer decides (nested tags: the innermost; an
                               unclosed last `<answer>` runs to the end of the reply)
2. `\\boxed{MOVE}`              the last box decides (`\\text{...}` inside is unwrapped)
3. `[MOVE]`                    the last bracket that holds a move, or something shaped like
                               one (`[9]`, `[-4]`, `[0.5]` in a numeric game), decides
4. the whole reply is the move ("4", "  Cooperate. ")
5. exactly one legal move is mentioned as a whole word in the reply

The last explicit answer is final: `<answer>4</answer> no wait <answer>9</answer>` is 9, or
illegal when 9 is, never 4.

Numbers are read whole: a number with a sign, a decimal part, a percent sign or an operator
attached (`-4`, `0.5`, `4,5`, `2**2`, `2 x 3`, `1/2`, `-> 4`) is a different number, not the
move 4, and so is one that labels another thing (`card 2`, `rank 1`, `player 2`, `round 3`:
moves of other games such as Hanabi's `Discard card 2`). So in goofspiel "I play card 7" is
no move; "[7]" and "I play 7" are.

`<think>...</think>` blocks are dropped first (an unclosed `<think>` drops everything after
it; a `</think>` without its opening tag, as when the chat template opened the block, drops
everything before it). Matching ignores case, Unicode width variants (NFKC), zero-width
characters, surrounding quotes/backticks/trailing punctuation, runs of whitespace and one
wrapping pair of `<>`, `[]`, `{}` or `()` (MARS-style `<answer><Bet></answer>`); an explicit
answer may itself hold a `\\boxed{}`. Every step is linear in the reply's length. The
normalised legal moves (and their number shapes) are computed once per list of legal moves
(`_legal_forms`, cached), not on every reply: a game offers the same lists again and again.
Failures raise `ParseError` whose `kind` is one of:

- `empty`     nothing left after removing the thinking;
- `no_move`   no candidate move found in the reply;
- `illegal`   a move was given in an explicit format but is not among the legal moves;
- `ambiguous` several different legal moves are mentioned and no format picks one;
- `too_long`  the reply exceeds `max_chars` (guards the matcher against huge outputs).

>>> parse_move("I pick \\\\boxed{4}", ["0", "4", "8"])
1
>>> parse_move("<think>maybe [0]?</think> [8]", ["0", "4", "8"])
2
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

ERROR_KINDS = ("empty", "no_move", "illegal", "ambiguous", "too_long")


class ParseError(ValueError):
    """A reply that does not name exactly one legal move. `kind` says why."""

    def __init__(self, kind: str, message: str):
        assert kind in ERROR_KINDS, kind
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"ParseError({self.kind!r}, {self.message!r})"


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_ANSWER_TAG = re.compile(r"<(/?)answer\s*>", re.I)
_BOXED = re.compile(r"\\boxed\s*\{")
_TEXT = re.compile(r"\\(?:text|textbf|textrm|texttt|mathrm|mathbf)\s*\{")
_MAX_MOVE = 200  # longest bracket (or reply) read as one move
_BRACKET = re.compile(rf"\[([^\[\]]{{1,{_MAX_MOVE}}})\]")
_STRIP = " \t\r\n\"'`*.,;:!?"
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_WRAPPERS = {"<>", "[]", "{}", "()"}
_PREFIXES = ("move ", "action ", "i choose ", "i play ")
_COLON_LABEL = re.compile(r"([a-z][a-z ]{0,40}):")

# Numbers are read whole. A digit run joined to a sign, a decimal point or comma, a percent
# sign, an operator with a number on its other side, or an arrow is part of another number;
# so is one a noun labels ("card 2"). The text these look at has single spaces.
_SIGNS = "-+−±–"
_OP = rf"[{_SIGNS}*/^=<>×÷⁄→x]"
_LEFT_JOINS = (  # each of fixed width, for lookbehinds
    [rf"[{_SIGNS}.,]", r"\d:"]
    + [rf"[\d%]{a}{op}{b}" for op in (_OP, r"\*\*") for a in ("", " ") for b in ("", " ")]
    + [arrow + b for arrow in ("->", "=>", "→") for b in ("", " ")]
)
_RIGHT_JOIN = rf"[.,]\d|%|:\d| ?(?:\*\*|->|=>|{_OP}) ?[{_SIGNS}]?[.,]?\d"
_PLAIN_NUMBER = re.compile(
    r"(?=\d)(?<!\w)" + "".join(f"(?<!{j})" for j in _LEFT_JOINS) + rf"\d+(?!\w)(?!{_RIGHT_JOIN})"
)
_JOINED_LEFT = re.compile(f"(?:{'|'.join(_LEFT_JOINS)})$")
_JOINED_RIGHT = re.compile(_RIGHT_JOIN)
_LABEL_NOUNS = "card rank player round turn row hand die dice hint offer seat team step level page line chapter version game"
_LABEL = rf"(?<![a-z])(?:{'|'.join(_LABEL_NOUNS.split())})s?[ :#]*(?:no\.? ?)?"  # "card 2", "Card: 2", "card no. 2"
_LABEL_BEFORE_NUMBER = re.compile(_LABEL + r"(?=\d)")
_LABEL_AT_END = re.compile(_LABEL + "$")
# A whole written number, for shapes: "-4", "0.5", "2**2", "2 x 3", "-> 4" are all "#".
# `(?<!\d)` starts it only at a digit run's start and no part can match in two ways: linear.
_OPERAND = rf"[{_SIGNS}]?(?:\d+(?:[.,]\d+)*|[.,]\d+(?:[.,]\d+)*)%?"
_NUMBER = re.compile(
    rf"(?<!\d)(?:(?:->|=>|→)\s*)?{_OPERAND}(?:(?:\s*(?:\*\*|->|=>|{_OP})\s*|:){_OPERAND})*"
)
_WORD = re.compile(r"\w")


def strip_thinking(reply: str) -> str:
    """The reply without `<think>...</think>` blocks (an unclosed block runs to the end)."""
    if "<" not in reply:  # no tag at all: nothing to drop
        return reply
    text = _THINK.sub(" ", reply)
    closing = text.lower().rfind("</think>")
    return text[closing + len("</think>") :] if closing >= 0 else text


def explicit_answer(reply: str) -> str | None:
    """What a reply's explicit format holds, read as `parse_move` reads it: the last
    `<answer>`, else the last `\\boxed{}`, else the last `[bracket]`; None when the reply
    (its `<think>` blocks dropped) has none. For a move no list of legal moves spells out
    (a free-form clue): the caller checks the text it gets."""
    text = strip_thinking(reply)
    answers = _answers(text)
    if answers:
        return answers[-1]
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    brackets = _BRACKET.findall(text)
    return brackets[-1] if brackets else None


def normalize(move: str) -> str:
    """Canonical form for comparing moves: lower case, single spaces, no wrapping quotes."""
    if move.isalnum() and move.isascii():  # letters and digits only: nothing to strip or join
        return move.lower()
    if not move.isascii():
        move = _ZERO_WIDTH.sub("", unicodedata.normalize("NFKC", move))
    move = move.rstrip(_STRIP)
    start = 0  # strip leading punctuation too, but not the point of ".5"
    while (
        start < len(move)
        and move[start] in _STRIP
        and not (move[start] in ".," and move[start + 1 : start + 2].isdigit())
    ):
        start += 1
    return " ".join(move[start:].lower().split())


def _nfkc(text: str, limit: int) -> str | None:
    """NFKC of `text`, or None when that is longer than `limit`. NFKC can expand a character
    18-fold ("ﷺ"), so a long reply is first measured chunk by chunk, stopping early."""
    if text.isascii():
        return text
    total = 0
    for k in range(0, len(text), 1000):
        total += len(unicodedata.normalize("NFKC", text[k : k + 1000]))
        if total > 2 * limit:
            return None
    text = unicodedata.normalize("NFKC", text)
    return text if len(text) <= limit else None


def _shape(form: str) -> str:
    """A normalised move with every number as "#": "-4" and "9" are shaped like the move "4"."""
    return (
        _NUMBER.sub("#", form)
        if len(form) <= _MAX_MOVE and any(c.isdigit() for c in form)
        else form
    )


def _braces(text: str, start: int):
    """(index of "{", index of its "}") for every balanced pair from `start` on, in one pass."""
    stack = []
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            yield stack.pop(), i


def _unwrap_text(inner: str) -> str:
    """`inner` without `\\text{...}`-style wrappers (their opening and closing braces), in one pass."""
    first = inner.find("\\")
    openers = {m.end() - 1: m.start() for m in _TEXT.finditer(inner, first)} if first >= 0 else {}
    if not openers:
        return inner
    cuts = []  # spans to delete: each wrapper's "\text{" and its "}"
    for o, c in _braces(inner, first):
        if o in openers:
            cuts += [(openers[o], o + 1), (c, c + 1)]
    out, last = [], 0
    for begin, end in sorted(cuts):
        out.append(inner[last:begin])
        last = end
    out.append(inner[last:])
    return "".join(out)


def _last_boxed(text: str) -> str | None:
    """The content of the last-opened closed `\\boxed{...}` (braces balanced), or None.

    One pass over the text from the first box with a stack of open braces, so a reply full
    of nested or unclosed boxes costs linear time."""
    first = text.find("\\boxed")
    if first < 0:
        return None
    starts = {m.end() - 1 for m in _BOXED.finditer(text, first)}
    best = max(((o, c) for o, c in _braces(text, first) if o in starts), default=None)
    return None if best is None else _unwrap_text(text[best[0] + 1 : best[1]])


def _answers(text: str) -> list[str]:
    """The contents of `<answer>` tags in order; nested tags give the innermost, and an
    unclosed last tag runs to the end."""
    found, opened = [], None
    if "<" not in text:
        return found
    for m in _ANSWER_TAG.finditer(text):
        if not m.group(1):
            opened = m.end()
        elif opened is not None:
            found.append(text[opened : m.start()])
            opened = None
    if opened is not None:
        found.append(text[opened:])
    return found


def _variants(candidate: str) -> list[str]:
    """Normalised forms a candidate may take: as is, unwrapped (`<Bet>`, `[4]`, a `\\boxed{}`
    inside an answer), and each without a `move:`-style label."""
    c = normalize(candidate)
    bases = [c]
    if len(c) > 2 and c[0] + c[-1] in _WRAPPERS:
        bases.append(normalize(c[1:-1]))
    boxed = _last_boxed(candidate) if "boxed" in candidate else None
    if boxed is not None:
        bases.append(normalize(boxed))
    forms = []
    for base in bases:
        forms.append(base)
        label = _COLON_LABEL.match(base) if ":" in base else None
        if label and not _LABEL_AT_END.search(label.group(1)):
            forms.append(normalize(base[label.end() :]))
        if base.startswith(_PREFIXES):
            prefix = next(p for p in _PREFIXES if base.startswith(p))
            forms.append(normalize(base[len(prefix) :]))
    return forms


def _mentions(text: str, forms: dict[str, int]) -> set[int]:
    """Indices of the forms mentioned in `text` (normalised) as whole words and whole numbers.

    Bare numbers come from one pass over the plain numbers; other forms are found with
    `str.find`, so the cost is one scan per form present, not a regex per form."""
    found = set()
    if any(form.isdigit() for form in forms):
        labelled = None
        for m in _PLAIN_NUMBER.finditer(text):
            i = forms.get(m.group())
            if i is not None and i not in found:
                labelled = (
                    labelled
                    if labelled is not None
                    else {n.end() for n in _LABEL_BEFORE_NUMBER.finditer(text)}
                )
                if m.start() not in labelled:
                    found.add(i)

    def whole(
        s: int, e: int
    ) -> bool:  # a form that starts or ends with a digit is read as numbers are
        if (s > 0 and _WORD.match(text, s - 1)) or _WORD.match(text, e):
            return False
        if text[s].isdigit() and (
            _JOINED_LEFT.search(text[max(0, s - 8) : s])
            or _LABEL_AT_END.search(text[max(0, s - 24) : s])
        ):
            return False
        return not (text[e - 1].isdigit() and _JOINED_RIGHT.match(text, e))

    for form, i in forms.items():
        if not form or form.isdigit():
            continue
        s = text.find(form)
        while s >= 0 and not whole(s, s + len(form)):
            s = text.find(form, s + 1)
        if s >= 0:
            found.add(i)
    return found


@lru_cache(maxsize=1024)
def _legal_forms(
    legal_moves: tuple[str, ...],
) -> tuple[dict[str, int], frozenset[str], dict[str, int]]:
    """The normalised legal moves (form -> index, the last of equal forms), their shapes, and
    each legal move string as given -> the index its normalised form finds."""
    index = {normalize(m): i for i, m in enumerate(legal_moves)}
    verbatim = {m: index[normalize(m)] for m in legal_moves}
    return index, frozenset(_shape(form) for form in index), verbatim


def _plain(reply: str, index: dict[str, int], verbatim: dict[str, int]) -> int | None:
    """The move a plain reply names, found without the full parse's passes: a reply that is,
    once stripped, `[MOVE]` (one bracket) or `MOVE`, in ASCII with no `<` (no tag) and no
    backslash (no box), whose MOVE normalises to a legal move. The full parse returns the
    same move for it: no think block, answer or box comes first, and the one bracket (or,
    without brackets, the whole reply) is looked up as that normalised form first. A MOVE
    written exactly as a legal move is found without normalising it (`verbatim`). None for
    any other reply (the full parse decides)."""
    if not reply.isascii() or "<" in reply or "\\" in reply:
        return None
    text = reply.strip()
    if text[:1] == "[" and text[-1:] == "]":
        inner = text[1:-1]
        if "[" in inner or "]" in inner or not 1 <= len(inner) <= _MAX_MOVE:
            return None
        found = verbatim.get(inner)
        return found if found is not None else index.get(normalize(inner))
    if "[" in text or not text:
        return None
    found = verbatim.get(text)
    return found if found is not None else index.get(normalize(text))


def parse_move(reply: str, legal_moves: list[str], max_chars: int = 20_000) -> int:
    """Index into `legal_moves` of the one move `reply` names; raises `ParseError`."""
    if reply is None:
        raise ParseError("empty", "the reply is empty")
    if len(reply) > max_chars:
        raise ParseError("too_long", f"the reply has {len(reply)} characters (limit {max_chars})")
    index, shapes, verbatim = _legal_forms(tuple(legal_moves))
    found = _plain(reply, index, verbatim)
    if found is not None:
        return found
    return _parse(reply, legal_moves, index, shapes, max_chars)


def _parse(
    reply: str, legal_moves: list[str], index: dict[str, int], shapes: frozenset, max_chars: int
) -> int:
    """`parse_move` without its shortcut for plain replies: every style, in order."""
    text = _nfkc(strip_thinking(reply), max_chars)
    if text is None:
        raise ParseError(
            "too_long", f"the reply has over {max_chars} characters once Unicode-normalised (NFKC)"
        )
    if not text.isascii():
        text = _ZERO_WIDTH.sub("", text)
    text = text.strip()
    if not text:
        raise ParseError("empty", "the reply is empty once <think> blocks are removed")

    def lookup(candidate: str) -> tuple[int | None, bool]:
        """(index of the legal move `candidate` names or None, whether it is shaped like a move)."""
        forms = _variants(candidate)
        for form in forms:
            if form in index:
                return index[form], True
        return None, any(_shape(form) in shapes for form in forms)

    def illegal(shown: str) -> ParseError:  # one line, however the reply was laid out
        return ParseError("illegal", f"{' '.join(shown.split())[:60]} is not a legal move")

    for style, candidate in (
        ("<answer>", (_answers(text) or [None])[-1]),
        ("\\boxed{}", _last_boxed(text)),
    ):
        if candidate is not None:
            found, _ = lookup(candidate)
            if found is None:
                raise ParseError(
                    "illegal",
                    f"{style} gives {candidate.strip()[:60]!r}, which is not a legal move",
                )
            return found

    brackets = _BRACKET.findall(text)
    for bracket in dict.fromkeys(reversed(brackets)):  # each content once, the last first
        found, move_like = lookup(bracket)
        if found is not None:
            return found
        if move_like:
            raise illegal(f"[{bracket.strip()}]")
    found, move_like = lookup(text)
    if found is not None:
        return found
    if move_like:
        raise illegal(text)

    mentioned = _mentions(" ".join(text.lower().split()), index)
    # A mention contained in another mention ("1" inside "1 2") doesn't count separately.
    forms = {i: normalize(legal_moves[i]) for i in mentioned}
    mentioned = {
        i for i in mentioned if not any(i != j and forms[i] in forms[j] for j in mentioned)
    }
    if len(mentioned) == 1:
        return mentioned.pop()
    if len(mentioned) > 1:
        shown = ", ".join(sorted(legal_moves[i] for i in mentioned)[:6])
        raise ParseError(
            "ambiguous", f"the reply mentions several legal moves ({shown}); give exactly one"
        )
    if brackets:
        raise illegal(f"[{brackets[-1].strip()}]")
    raise ParseError(
        "no_move",
        "no move found in the reply; answer with one legal move, e.g. [" + legal_moves[0] + "]"
        if legal_moves
        else "no move found and there are no legal moves",
    )
