"""Ranking a group of trajectories with a judge (ArenaRL): batch calls per round, position
swaps that cancel a biased judge, an LLM judge over a real (tiny) model."""

import pytest

from agents.backend import Generation
from tournaments.judge import LLMJudge, judge_group, rank_group, score_judge


def test_one_judge_call_per_round_and_swapped_positions():
    calls = []
    quality = [0.3, 0.9, 0.1, 0.5, 0.7]

    def judge(pairs):
        calls.append(list(pairs))
        return score_judge(quality)(pairs)

    outcome = judge_group(5, judge, "round_robin", games=2)
    assert len(calls) == 1 and len(calls[0]) == 20  # 10 pairings x 2 games, one batch
    # each pairing is judged in both orders
    assert {(a, b) for a, b in calls[0]} == {(a, b) for a in range(5) for b in range(5) if a != b}
    assert outcome.order == [1, 4, 3, 0, 2]


class BiasedJudgeBackend:
    """A judge that adds 3 points to whichever response it sees first ("A")."""

    name = "biased"

    def __init__(self, quality):
        self.quality = quality
        self.calls = 0

    def generate(self, conversations, params, allowed=None):
        self.calls += 1
        out = []
        for conv in conversations:
            text = conv[-1]["content"]
            a = text.split("[Response A]\n")[1].split("\n[End of Response A]")[0]
            b = text.split("[Response B]\n")[1].split("\n[End of Response B]")[0]
            sa, sb = min(10, self.quality[a] + 3), self.quality[b]
            out.append(
                Generation(
                    text=f"A: {sa}\nB: {sb}",
                    token_ids=[],
                    logprobs=[],
                    prompt_token_ids=[],
                    finish_reason="stop",
                )
            )
        return out


def test_llm_judge_position_swap_cancels_bias():
    items = ["answer-0", "answer-1", "answer-2", "answer-3", "answer-4", "answer-5"]
    quality = {
        "answer-0": 4,
        "answer-1": 6,
        "answer-2": 2,
        "answer-3": 5,
        "answer-4": 1,
        "answer-5": 3,
    }
    backend = BiasedJudgeBackend(quality)
    judge = LLMJudge(backend, items, task="Say something.")
    ranks = rank_group(len(items), judge)
    assert [items[i] for i in sorted(range(6), key=lambda i: ranks[i])] == sorted(
        items, key=lambda x: -quality[x]
    )
    assert judge.parse_failures == 0
    assert judge.calls == backend.calls == 4  # seeding round + 3 bracket rounds (8 slots)
    # without the swap the biased judge would just favour whoever is listed first
    one_sided = judge_group(
        len(items), lambda pairs: [(quality[items[a]] + 3, quality[items[b]]) for a, b in pairs]
    )
    assert one_sided.order != sorted(range(6), key=lambda i: -quality[items[i]])


def test_llm_judge_parses_and_counts_failures():
    judge = LLMJudge(backend=None, items=[], task="")
    assert judge.parse("A: 7\nB: 3") == (7.0, 3.0)
    assert judge.parse("Scores -- a = 12, B: 2.5") == (5.0, 5.0)  # A not at a line start: neutral
    assert judge.parse("A: 12\nB: 2.5") == (10.0, 2.5)  # clipped
    assert judge.parse("no idea") == (5.0, 5.0)
    assert judge.parse_failures == 2


def test_llm_judge_on_a_real_tiny_model():
    from agents import backend_for
    from agents.backend import SamplingParams

    backend = backend_for("transformers", "tiny-llama")
    judge = LLMJudge(
        backend,
        ["short", "a longer answer", "x"],
        task="Name a colour.",
        params=SamplingParams(max_new_tokens=6, temperature=0.0),
    )
    ranks = rank_group(3, judge)
    assert sorted(ranks) == [0, 1, 2]
    # a random 2-layer model writes no scores: every reply is neutral and counted
    assert judge.calls >= 2 and judge.parse_failures > 0


def test_group_of_one_and_errors():
    assert rank_group(1, score_judge([1.0])) == [0]
    with pytest.raises(ValueError, match="at least one item"):
        rank_group(0, score_judge([]))
    with pytest.raises(RuntimeError, match="judge returned 1 scores for 2"):
        rank_group(3, lambda pairs: [(1.0, 0.0)])
