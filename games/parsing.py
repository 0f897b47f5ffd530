"""Turn a model's reply into exactly one legal move, or say why not.

The one place that parses moves. Models answer in many styles; we accept, in order of
precedence (the first style present decides):

1. `<answer>MOVE</answer>`     (last one wins)
2. `\\boxed{MOVE}`              (last one wins; `\\text{...}` inside is unwrapped)
3. `[MOVE]`                    (last bracketed legal move wins)
4. the whole reply is the move ("4", "  Cooperate. ")
5. exactly one legal move is mentioned as a whole word in the reply

`<think>...</think>` blocks are dropped first (an unclosed `<think>` drops everything after
it; a `</think>` without its opening tag, as when the chat template opened the block, drops
everything before it). Matching ignores case, Unicode width variants (NFKC), zero-width
characters, surrounding quotes/backticks/trailing punctuation, runs of whitespace and one
wrapping pair of `<>`, `[]`, `{}` or `()` (MARS-style `<answer><Bet></answer>`); an explicit
answer may itself hold a `\\boxed{}`. Failures raise `ParseError` whose `kind` is one of:

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
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_BRACKET = re.compile(r"\[([^\[\]]{1,200})\]")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|texttt)\{([^{}]*)\}")
_STRIP = " \t\r\n\"'`*.,;:!?"
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))
_WRAPPERS = ("<>", "[]", "{}", "()")


def strip_thinking(reply: str) -> str:
    """The reply without `<think>...</think>` blocks (an unclosed block runs to the end)."""
    text = _THINK.sub(" ", reply)
    closing = text.lower().rfind("</think>")
    return text[closing + len("</think>") :] if closing >= 0 else text


def normalize(move: str) -> str:
    """Canonical form for comparing moves: lower case, single spaces, no wrapping quotes."""
    move = unicodedata.normalize("NFKC", move).translate(_ZERO_WIDTH)
    return " ".join(move.strip(_STRIP).lower().split())


def _boxed(text: str) -> list[str]:
    """Contents of every `\\boxed{...}`, balancing nested braces, in order of appearance.

    One pass over the text with a stack of open braces, so a reply full of unclosed
    `\\boxed{` costs linear time, not quadratic."""
    starts = {m.end() - 1: m.end() for m in re.finditer(r"\\boxed\s*\{", text)}  # "{" index -> content start
    if not starts:
        return []
    found, stack = [], []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(starts.get(i))
        elif ch == "}" and stack:
            start = stack.pop()
            if start is not None:
                found.append((start, text[start:i]))
    out = []
    for _, inner in sorted(found):
        while _TEXT.search(inner):
            inner = _TEXT.sub(r"\1", inner)
        out.append(inner)
    return out


def _variants(candidate: str) -> list[str]:
    """Normalised forms a candidate may take: as is, unwrapped (`<Bet>`, `[4]`, a `\\boxed{}`
    inside an answer), and each without a `move:`-style label."""
    c = normalize(candidate)
    bases = [c]
    if len(c) > 2 and any(c[0] == a and c[-1] == b for a, b in _WRAPPERS):
        bases.append(normalize(c[1:-1]))
    boxed = _boxed(candidate) if "boxed" in candidate else []
    if boxed:
        bases.append(normalize(boxed[-1]))
    forms = []
    for base in bases:
        forms.append(base)
        if ":" in base:
            forms.append(normalize(base.rsplit(":", 1)[1]))
        for prefix in ("move ", "action ", "i choose ", "i play "):
            if base.startswith(prefix):
                forms.append(normalize(base[len(prefix) :]))
    return forms


def parse_move(reply: str, legal_moves: list[str], max_chars: int = 20_000) -> int:
    """Index into `legal_moves` of the one move `reply` names; raises `ParseError`."""
    if reply is None:
        raise ParseError("empty", "the reply is empty")
    if len(reply) > max_chars:
        raise ParseError("too_long", f"the reply has {len(reply)} characters (limit {max_chars})")
    text = unicodedata.normalize("NFKC", strip_thinking(reply)).translate(_ZERO_WIDTH).strip()
    if not text:
        raise ParseError("empty", "the reply is empty once <think> blocks are removed")
    index = {normalize(m): i for i, m in enumerate(legal_moves)}

    def lookup(candidates: list[str]) -> int | None:
        for cand in reversed(candidates):  # the last stated answer is the final one
            for form in _variants(cand):
                if form in index:
                    return index[form]
        return None

    for style, candidates in (("<answer>", _ANSWER.findall(text)), ("\\boxed{}", _boxed(text))):
        if candidates:
            found = lookup(candidates)
            if found is None:
                shown = candidates[-1].strip()[:60]
                raise ParseError("illegal", f"{style} gives {shown!r}, which is not a legal move")
            return found

    brackets = _BRACKET.findall(text)
    found = lookup(brackets)
    if found is not None:
        return found
    found = lookup([text])
    if found is not None:
        return found

    lowered = " ".join(text.lower().split())
    mentioned = {
        i for form, i in index.items() if form and re.search(rf"(?<![\w]){re.escape(form)}(?![\w])", lowered)
    }
    # A mention contained in another mention ("1" inside "1 2") doesn't count separately.
    forms = {i: normalize(legal_moves[i]) for i in mentioned}
    mentioned = {i for i in mentioned if not any(i != j and forms[i] in forms[j] for j in mentioned)}
    if len(mentioned) == 1:
        return mentioned.pop()
    if len(mentioned) > 1:
        shown = ", ".join(sorted(legal_moves[i] for i in mentioned)[:6])
        raise ParseError("ambiguous", f"the reply mentions several legal moves ({shown}); give exactly one")
    if brackets:
        raise ParseError("illegal", f"[{brackets[-1].strip()[:60]}] is not a legal move")
    raise ParseError("no_move", "no move found in the reply; answer with one legal move, e.g. [" + legal_moves[0] + "]"
                     if legal_moves else "no move found and there are no legal moves")
