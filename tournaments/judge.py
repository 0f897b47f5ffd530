"""Rank a group of trajectories with a judge (ArenaRL).

The same formats that rank agents rank a group of N items (trajectories, answers): the
players are the indices 0..N-1 and a "game" is one judge comparison. A judge is a batch
function `compare(pairs) -> [(score_a, score_b), ...]`, called once per format round, so
an LLM judge scores a whole round in one backend call. The ranks become advantages in
`training.advantages.ranks_to_advantages`.

    ranks = rank_group(len(items), score_judge(rewards))                # 0 = best
    ranks = rank_group(len(items), LLMJudge(backend, texts, task))     # ArenaRL

Defaults follow ArenaRL: seeded single elimination whose seeding phase judges every item
against item 0 (the anchor, decoded greedily by the caller). `LLMJudge` asks for both
items' scores twice, once with the positions swapped, and sums, cancelling position bias.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.backend import Backend, SamplingParams
from tournaments.formats import make_format
from tournaments.rounds import Outcome, Pairing, PairResult, drive

Compare = Callable[[list[tuple[int, int]]], list[tuple[float, float]]]

JUDGE_SYSTEM = (
    "You are an impartial judge. You compare two responses to the same task and score each one."
)
JUDGE_PROMPT = """Task:
{task}

[Response A]
{a}
[End of Response A]

[Response B]
{b}
[End of Response B]

Score each response from 0 to {max_score} for how well it accomplishes the task. Reply with exactly two lines:
A: <score>
B: <score>"""
_SCORE = {side: re.compile(rf"(?im)^\W*{side}\W*[:=]\s*(\d+(?:\.\d+)?)") for side in "AB"}


def score_judge(scores: Sequence[float]) -> Compare:
    """Compare items by a known scalar (e.g. the task reward): the higher one wins."""
    values = [float(s) for s in scores]
    return lambda pairs: [(values[a], values[b]) for a, b in pairs]


@dataclass
class LLMJudge:
    """A pairwise LLM judge over any `Backend`, called twice with positions swapped.

    Each comparison sends (a as A, b as B) and (b as A, a as B) in the same batch; item a
    scores its A score of the first plus its B score of the second (0..2*max_score).
    Replies that give no parseable score count max_score/2 (neutral) and are counted.
    """

    backend: Backend
    items: Sequence[str]  # the rendered trajectories / answers, by index
    task: str  # the prompt they answer
    max_score: int = 10
    params: SamplingParams = field(
        default_factory=lambda: SamplingParams(max_new_tokens=16, temperature=0.0)
    )
    calls: int = 0  # backend calls made
    parse_failures: int = 0  # replies without a score

    def __call__(self, pairs: list[tuple[int, int]]) -> list[tuple[float, float]]:
        convs = []
        for a, b in pairs:
            convs.append(self.conversation(a, b))
            convs.append(self.conversation(b, a))
        gens = self.backend.generate(convs, self.params)
        self.calls += 1
        if len(gens) != len(convs):
            raise RuntimeError(
                f"judge backend returned {len(gens)} generations for {len(convs)} conversations"
            )
        out = []
        for k in range(len(pairs)):
            a_first, a_second = self.parse(gens[2 * k].text)
            b_first, b_second = self.parse(gens[2 * k + 1].text)
            out.append((a_first + b_second, a_second + b_first))
        return out

    def conversation(self, a: int, b: int) -> list[dict]:
        text = JUDGE_PROMPT.format(
            task=self.task, a=self.items[a], b=self.items[b], max_score=self.max_score
        )
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": text}]

    def parse(self, reply: str) -> tuple[float, float]:
        """(score of A, score of B), clipped to [0, max_score]; neutral when unparseable."""
        found = [_SCORE[s].search(reply) for s in "AB"]
        if not all(found):
            self.parse_failures += 1
            return self.max_score / 2, self.max_score / 2
        return tuple(min(max(float(m.group(1)), 0.0), float(self.max_score)) for m in found)


def judge_group(n: int, compare: Compare, format: str = "single_elimination", **options) -> Outcome:
    """Run `format` over items 0..n-1 with `compare`; the format's full Outcome.

    Default options for single elimination: seeding against item 0 ("anchor"), as ArenaRL.
    """
    if n < 1:
        raise ValueError(f"need at least one item to rank, got {n}")
    if n == 1:
        return Outcome([0], {0: {"points": 0.0, "games": 0, "mean_points": 0.0, "mean_score": 0.0}})
    if format in ("single_elimination", "double_elimination"):
        options.setdefault("seeding", "anchor")
        options.setdefault("anchor", 0)

    def play_round(pairings: list[Pairing]) -> list[PairResult]:
        pairs, owners = [], []
        for i, p in enumerate(pairings):
            for g in range(p.first_game, p.first_game + p.games):
                pairs.append((p.a, p.b) if g % 2 == 0 else (p.b, p.a))
                owners.append((i, g % 2 == 1))
        scores = compare(pairs)
        if len(scores) != len(pairs):
            raise RuntimeError(f"judge returned {len(scores)} scores for {len(pairs)} comparisons")
        per: list[list[tuple[float, float]]] = [[] for _ in pairings]
        for (i, swapped), (s1, s2) in zip(owners, scores):
            per[i].append((s2, s1) if swapped else (s1, s2))
        return [PairResult.from_scores(s) for s in per]

    return drive(make_format(format, list(range(n)), **options), play_round)


def rank_group(
    n: int, compare: Compare, format: str = "single_elimination", **options
) -> list[int]:
    """0-based rank of each item 0..n-1 (0 = best) under `format` with `compare`."""
    ranks = judge_group(n, compare, format, **options).ranks()
    return [ranks[i] for i in range(n)]
