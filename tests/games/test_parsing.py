"""The reply parser: the formats models actually produce, and a typed error for the rest."""

import contextlib
import doctest
import gc
import time

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
    reply = "\\boxed{" * 5000 + "4"
    start = time.perf_counter()
    with pytest.raises(ParseError):
        parse_move(reply, CELLS)
    assert time.perf_counter() - start < 1.0


GOOF = [str(i) for i in range(1, 14)]


@pytest.mark.parametrize(
    "reply, moves",
    [
        ("-4", CELLS),
        ("[-4]", CELLS),
        ("+4", CELLS),
        ("cell -4", CELLS),
        ("[2**2]", CELLS),
        ("4/9", CELLS),
        ("4%", CELLS),
        ("1 x 1", CELLS),  # Liar's dice's bid, or 1 times 1
        ("0.5", GOOF),
        ("[0.5]", GOOF),
        ("4.0", GOOF),
        ("I bid 10:30", GOOF),
        ("-> 4", GOOF),
    ],
)
def test_a_number_with_a_sign_decimal_or_operator_is_another_number(reply, moves):
    with pytest.raises(ParseError) as e:
        parse_move(reply, moves)
    assert e.value.kind in ("illegal", "no_move")


@pytest.mark.parametrize(
    "reply",
    [
        "Discard card 2",
        "Play card 2",
        "Hint rank 1 to player_1",
        "Offer: 1 Wood -> 1 Gold",
        "[Offer: 1 Wood -> 1 Gold]",
    ],
)
def test_a_move_of_another_game_is_not_a_number_move(reply):
    for moves in (CELLS, GOOF):
        with pytest.raises(ParseError):
            parse_move(reply, moves)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Round 3 of 10: I play 4", "4"),  # "round 3" labels the round
        ("I'll take the centre: \\boxed{4}", "4"),
        ("I'll play **4**.", "4"),
        ("cell #4", "4"),
        ("I choose $4$", "4"),
        ("4\ufe0f\u20e3", "4"),  # keycap emoji
        ("On this 3x3 board, cells 0-2 are taken, so 4", "4"),
    ],
)
def test_numbers_in_prose_that_still_name_the_move(reply, expected):
    assert CELLS[parse_move(reply, CELLS)] == expected


@pytest.mark.parametrize(
    "reply",
    [
        "<answer>4</answer> no wait <answer>9</answer>",
        "\\boxed{4} no wait \\boxed{9}",
        "[4] no wait [9]",
        "[4] no wait [-4]",
        "<answer>4</answer> no wait <answer>9",  # an unclosed last answer still counts
    ],
)
def test_the_last_explicit_answer_counts_even_when_illegal(reply):
    with pytest.raises(ParseError) as e:
        parse_move(reply, CELLS)
    assert e.value.kind == "illegal"
    assert GOOF[parse_move(reply.replace("-4", "9"), GOOF)] == "9"


def test_nested_answer_tags_read_the_innermost():
    assert CELLS[parse_move("<answer><answer>4</answer>", CELLS)] == "4"
    assert CELLS[parse_move("<answer>2<answer>4</answer></answer>", CELLS)] == "4"


@pytest.mark.parametrize(
    "reply",
    [
        "\\boxed{" + "\\text{" * 2400 + "4" + "}" * 2400 + "}",  # about 2 s before
        "\\boxed{\\text{" * 700 + "4" + "}}" * 700,
        "\ufdfa" * 20_000,  # NFKC expands each character 18-fold
        "".join(f"[a{i}]" for i in range(3000))[:20_000],
        "card 4 " * 2800,
        "-4" * 10_000,
    ],
    ids=[
        "boxed-text-nested",
        "boxed-text-pairs",
        "nfkc-expansion",
        "3000-brackets",
        "labels",
        "signs",
    ],
)
def test_crafted_replies_parse_fast(reply):
    # This thread's CPU time: other processes, and threads earlier tests left running
    # (servers, loggers), don't count; nor does a garbage collection of their objects.
    gc.disable()
    try:
        start = time.thread_time()
        with contextlib.suppress(ParseError):
            parse_move(reply, CELLS)
        spent = time.thread_time() - start
    finally:
        gc.enable()
    assert spent < 0.1


def test_strip_thinking():
    assert strip_thinking("<think>a</think>b<think>c</think>d").split() == ["b", "d"]
    assert strip_thinking("a</think>b") == "b"
    assert strip_thinking("a<think>b").strip() == "a"


def test_module_examples():
    assert doctest.testmod(games.parsing).failed == 0


def _outcome(parse, reply: str, moves: list[str]):
    try:
        return parse(reply, moves)
    except ParseError as e:
        return e.kind


ODD_MOVES = ["a.\x0c", "A", "Offer 2 Wood for 1 Gold", "x  y", ".5", "[7]", "4"]


@pytest.mark.parametrize("moves", [CELLS, POKER, IPD, TRADE, ODD_MOVES, CELLS[:3]])
def test_the_plain_reply_shortcut_answers_as_the_full_parse(moves):
    """`parse_move` finds a plain reply ("[4]", "Bet") without the full parse's passes; for
    every reply it gives what the full parse (`_parse`, every style in order) gives."""
    forms = games.parsing._legal_forms(tuple(moves))

    def full(reply, legal):
        return games.parsing._parse(reply, legal, forms[0], forms[1], 20_000)

    shapes = ["{}", "[{}]", " [{}] ", "{}.", "[{}.]", "[ {} ]", "[{}]]", "[[{}]", "[{}] [{}]"]
    shapes += ["'{}'", "[{}]\t", "{} ", "[{}] and", "<b>[{}]</b>", "\\[{}]", "[{}\u200b]"]
    words = [*moves, *(m.upper() for m in moves), *(m.lower() + "." for m in moves)]
    words += ["a.", "a", "9", "04", "x y", "", " ", "[", "offer 2 wood for 1 gold"]
    checked = 0
    for word in words:
        for shape in shapes:
            reply = shape.replace("{}", word)
            assert _outcome(parse_move, reply, moves) == _outcome(full, reply, moves), reply
            checked += 1
    assert checked == len(words) * len(shapes)
