"""The reply parser: the formats models actually produce, and a typed error for the rest."""

import doctest

import pytest

import games.parsing
from games.parsing import ERROR_KINDS, ParseError, parse_move, strip_thinking

CELLS = [str(i) for i in range(9)]
POKER = ["Pass", "Bet"]
IPD = ["Cooperate", "Defect"]
TRADE = ["Accept", "Deny", "Offer 2 Wood for 1 Gold"]


@pytest.mark.parametrize(
    "reply, moves, expected",
    [
        ("4", CELLS, "4"),
        ("[4]", CELLS, "4"),
        ("I'll take the centre: [4].", CELLS, "4"),
        ("\\boxed{4}", CELLS, "4"),
        ("The answer is $\\boxed{\\text{4}}$", CELLS, "4"),
        ("<answer>4</answer>", CELLS, "4"),
        ("<ANSWER> 4 </ANSWER>", CELLS, "4"),
        ("<answer>\\boxed{4}</answer>", CELLS, "4"),
        ("<answer>[4]</answer>", CELLS, "4"),
        ("[2] looks weak, so [6]", CELLS, "6"),  # the last bracketed move is the final word
        ("<answer>2</answer> on reflection <answer>6</answer>", CELLS, "6"),
        ("bet", POKER, "Bet"),
        ("  BET.  ", POKER, "Bet"),
        ("<answer><Pass></answer>", POKER, "Pass"),  # MARS-style angle brackets inside the answer
        ("**Bet**", POKER, "Bet"),
        ("`Pass`", POKER, "Pass"),
        ("Move: Bet", POKER, "Bet"),
        ("I choose Defect", IPD, "Defect"),
        ("I think cooperating is fair, so I Cooperate this round.", IPD, "Cooperate"),
        ("ｂｅｔ", POKER, "Bet"),  # full-width letters (NFKC)
        ("Be\u200bt", POKER, "Bet"),  # a zero-width space inside the word
        ("[offer  2 wood for 1 GOLD]", TRADE, "Offer 2 Wood for 1 Gold"),
        ("<think>[0] or [8]? The centre is best.</think>[4]", CELLS, "4"),
        ("<think>unclosed thinking that mentions [0]", CELLS + ["x"], None),  # all thinking: empty
        ("the template opened it</think> [5]", CELLS, "5"),
    ],
)
def test_accepted_reply_styles(reply, moves, expected):
    if expected is None:
        with pytest.raises(ParseError) as e:
            parse_move(reply, moves)
        assert e.value.kind == "empty"
    else:
        assert moves[parse_move(reply, moves)] == expected


@pytest.mark.parametrize(
    "reply, moves, kind",
    [
        ("", CELLS, "empty"),
        ("   \n ", CELLS, "empty"),
        (None, CELLS, "empty"),
        ("<think>all reasoning, no answer</think>", CELLS, "empty"),
        ("I am not sure what to do here.", CELLS, "no_move"),
        ("\\boxed{9}", CELLS, "illegal"),
        ("<answer>Raise</answer>", POKER, "illegal"),
        ("[Raise]", POKER, "illegal"),
        ("Either Pass or Bet could work.", POKER, "ambiguous"),
        ("x" * 20_001, CELLS, "too_long"),
    ],
)
def test_rejected_replies_say_why(reply, moves, kind):
    with pytest.raises(ParseError) as e:
        parse_move(reply, moves)
    assert e.value.kind == kind and e.value.kind in ERROR_KINDS
    assert e.value.message and "\n" not in e.value.message


def test_an_explicit_format_beats_bare_mentions():
    # Bare mentions of two moves would be ambiguous; the bracket decides.
    assert POKER[parse_move("Pass is safe but Bet is bold: [Pass]", POKER)] == "Pass"


def test_a_move_inside_a_longer_move_is_not_counted_twice():
    moves = ["1", "1 2", "3"]
    assert moves[parse_move("I bid 1 2 now", moves)] == "1 2"


def test_a_number_inside_another_number_is_not_a_mention():
    assert parse_move("I'd play 14 if I could; otherwise nothing", CELLS + ["14"]) == 9
    with pytest.raises(ParseError) as e:
        parse_move("row 14", CELLS)
    assert e.value.kind == "no_move"


def test_pathological_boxes_parse_in_linear_time():
    import time

    reply = "\\boxed{" * 5000 + "4"
    start = time.perf_counter()
    with pytest.raises(ParseError):
        parse_move(reply, CELLS)
    assert time.perf_counter() - start < 1.0


def test_strip_thinking():
    assert strip_thinking("<think>a</think>b<think>c</think>d").split() == ["b", "d"]
    assert strip_thinking("a</think>b") == "b"
    assert strip_thinking("a<think>b").strip() == "a"


def test_module_examples():
    assert doctest.testmod(games.parsing).failed == 0
