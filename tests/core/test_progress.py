"""Live progress: turns and generated tokens reach the display as they are played, before any
match ends; a log that is not a terminal gets a bounded number of plain lines."""

import io

import pytest

from agents import make_agent
from arena.runner import plan_matches, play
from cli.main import main as arena_main
from core.progress import Progress


class Recorder:
    """A progress hook that keeps every event in order."""

    def __init__(self):
        self.events = []

    def turns(self, n, tokens):
        self.events.append(("turns", n, tokens))

    def update(self, n):
        self.events.append(("match", n, 0))


def _until_first_match(events):
    return events[: next(i for i, e in enumerate(events) if e[0] == "match")]


def test_turn_events_arrive_before_the_first_match_ends():
    specs = ["random", "mcts:10"]
    hook = Recorder()
    records = list(
        play(
            plan_matches("tic_tac_toe", specs, 3),
            {s: make_agent(s) for s in specs},
            concurrency=3,
            progress=hook,
        )
    )
    before = _until_first_match(hook.events)
    assert sum(n for _, n, _ in before) >= 5  # a tic-tac-toe match takes at least 5 moves
    assert sum(n for kind, n, _ in hook.events if kind == "turns") == sum(
        len(r.turns) for r in records
    )
    assert sum(n for kind, n, _ in hook.events if kind == "match") == 3


def test_an_llm_agent_reports_its_generated_tokens_per_batch_mid_match():
    spec = "llm:tiny-llama,max_new_tokens=3,fallback=random,max_retries=0"
    agents = {"tiny": make_agent(spec, "tiny"), "random": make_agent("random")}
    hook = Recorder()
    records = list(
        play(
            plan_matches("tic_tac_toe", ["tiny", "random"], 4), agents, concurrency=4, progress=hook
        )
    )
    before = _until_first_match(hook.events)
    assert any(tokens > 0 for _, _, tokens in before)
    assert sum(tokens for _, _, tokens in hook.events) == sum(r.completion_tokens for r in records)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_off_a_terminal_a_long_evaluation_logs_every_5_percent_and_every_minute_with_the_time_left():
    clock, out = FakeClock(), io.StringIO()
    with Progress(
        total=2000, desc="eval", file=out, clock=clock
    ) as bar:  # a StringIO is no terminal
        for i in range(6000):  # 50 minutes: a batched call every 0.5 s, a match ending every 1.5 s
            clock.now = i * 0.5
            bar.turns(4, 0)
            if i % 3 == 2:
                bar.update(1)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text  # plain lines, no bar or colour codes
    lines = text.splitlines()
    done = [int(line.split()[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and done[-1] == 2000 and len(set(done)) == len(done)
    for k in range(1, 20):  # every 5% mark is logged as it is passed
        assert any(100 * k <= d < 100 * k + 5 for d in done), k
    assert (
        3000 / 60 <= len(lines) <= 3000 / 60 + 20 + 1
    )  # a line a minute at least, and no more than minute + 5% lines
    half = next(line for line in lines if line.startswith("eval: 1000/2000"))
    assert (
        half == "eval: 1000/2000 matches, 50.0%, 12000 turns, 24:59 elapsed, ~25 min left"
    )  # match 1000 ends at call 2999: 1499.5 s
    assert lines[-1] == "eval: 2000/2000 matches, 100.0%, 24000 turns, 49:59 elapsed"
    for line, d in zip(
        lines[:-1], done
    ):  # the estimate is the true time left (a match every 1.5 s), to its rounding
        n, unit = line.split("~")[1].split()[:2]
        left = float(n) * {"s": 1, "min": 60, "h": 3600}[unit]
        assert abs(left - 1.5 * (2000 - d)) <= {"s": 1, "min": 30, "h": 180}[unit], line


def test_the_time_left_waits_for_a_rate_measured_after_the_first_batch():
    """100 matches, 16 live at once: the first 16 end together at 30 s (warm-up and a whole match
    each), then one every 0.5 s: 72 s in all. The average since the start said ~50 min left when
    the first match ended (30 s x 99); the time left waits until the rate after the first batch is
    measured over as long as the first match took, and is then the true one."""
    for tty in (False, True):
        clock, out = FakeClock(), io.StringIO()
        bar = Progress(total=100, desc="t", file=out, clock=clock, tty=tty, interval=1.0)
        clock.now = 30.0
        for _ in range(16):
            bar.update(1)
            bar.turns(9, 0)
        for k in range(1, 85):
            clock.now = 30.0 + 0.5 * k
            bar.update(1)
            bar.turns(9, 0)
            if clock.now < 60.0 or bar.done == 100:
                assert "left" not in bar.line() and bar.eta() is None, (clock.now, bar.line())
            else:
                assert bar.eta() == pytest.approx(0.5 * (100 - bar.done)), clock.now
        text = out.getvalue()
        assert "~1 s left" in text and "<" not in text and "min left" not in text
        bar.close()


def test_off_a_terminal_a_fast_run_prints_its_end_only_and_a_stuck_one_a_line_a_minute():
    clock, out = FakeClock(), io.StringIO()
    with Progress(total=36, desc="quick", file=out, clock=clock) as bar:
        for i in range(
            36
        ):  # 36 matches in 3.6 s: every 5% mark comes within min_gap of the last line
            clock.now = i * 0.1
            bar.update(1)
    assert out.getvalue() == "quick: 36/36 matches, 100.0%, 0 turns, 0:03 elapsed\n"
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(total=4, desc="slow", file=out, clock=clock)
    for i in range(
        1, 181
    ):  # 3 minutes of turns and no match finished: no 5% mark, a line each minute
        clock.now = i
        bar.turns(1, 10)
    assert out.getvalue().splitlines() == [
        f"slow: 0/4 matches, 0.0%, {t} turns, {10 * t} tokens (10.0 tok/s), {t // 60}:00 elapsed"
        for t in (60, 120, 180)
    ]
    bar.close()
    assert (
        out.getvalue().count("\n") == 3
    )  # nothing new since the last line: no final line repeating it


def test_without_a_file_the_lines_go_to_stdout_when_it_is_a_log_and_a_bar_to_a_terminal(
    monkeypatch,
):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log, terminal = io.StringIO(), Terminal()
    monkeypatch.setattr("sys.stdout", log)
    monkeypatch.setattr("sys.stderr", terminal)
    with Progress(total=2, desc="eval") as bar:  # `arena eval ... > eval.log` from a terminal
        bar.update(2)
    assert (
        log.getvalue() == "eval: 2/2 matches, 100.0%, 0 turns, 0:00 elapsed\n"
        and terminal.getvalue() == ""
    )
    monkeypatch.setattr("sys.stdout", Terminal())
    with Progress(total=2, desc="eval") as bar:  # interactive: a bar on stderr
        bar.update(2)
    assert bar.tty and "2/2" in terminal.getvalue() and "\r" in terminal.getvalue()


def test_short_runs_off_a_terminal_print_one_line_and_transient_ones_none():
    out = io.StringIO()
    with Progress(total=2, desc="g", file=out, tty=False) as bar:
        bar.turns(3, 0)
        bar.update(2)
    assert out.getvalue() == "g: 2/2 matches, 100.0%, 3 turns, 0:00 elapsed\n"
    quiet = io.StringIO()
    with Progress(total=2, file=quiet, tty=False, leave=False) as bar:
        bar.turns(3, 9)
    assert quiet.getvalue() == ""


def test_on_a_terminal_the_bar_shows_turns_and_tokens_before_a_match_ends():
    clock, out = FakeClock(), io.StringIO()
    bar = Progress(total=36, desc="quickstart", file=out, tty=True, clock=clock)
    clock.now = 2.0
    bar.turns(16, 200)
    assert (
        "0/36" in out.getvalue().split("\r")[-1]
        and "16 turns, 200 tokens (100.0 tok/s)" in out.getvalue().split("\r")[-1]
    )
    clock.now = 2.1  # within 0.2 s of the last refresh: the postfix waits for the next one
    bar.turns(16, 200)
    assert "32 turns" not in out.getvalue()
    clock.now = 2.5
    bar.turns(1, 0)
    assert "33 turns, 400 tokens" in out.getvalue().split("\r")[-1]
    bar.close()


def test_arena_play_off_a_terminal_ends_with_one_progress_line(capsys):
    assert (
        arena_main(["play", "tic_tac_toe", "--agents", "random", "mcts:10", "--matches", "4"]) == 0
    )
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("tic_tac_toe: ")]
    assert (
        len(lines) == 1
        and lines[0].startswith("tic_tac_toe: 4/4 matches, 100.0%, ")
        and " turns, " in lines[0]
    )
    assert out.index(lines[0]) < out.index("4 matches in")  # before the summary the command prints
    assert err == ""


def test_training_rollouts_and_evaluations_show_their_turns_as_they_happen(
    tmp_path, monkeypatch, capsys
):
    import functools

    from rich.console import Console

    from training import periodic_eval, selfplay

    for module in (selfplay, periodic_eval):  # the rollouts' bars, the evaluations'
        monkeypatch.setattr(
            module, "Progress", functools.partial(Progress, interval=0)
        )  # a line per event
    cfg = selfplay.parse_config(
        {
            "model": "tiny-llama",
            "seed": 3,
            "steps": 1,
            "games": ["tic_tac_toe"],
            "matches_per_step": 4,
            "concurrency": 4,
            "agent": {
                "prompt": "compact",
                "constrained": True,
                "max_new_tokens": 4,
                "max_retries": 0,
            },
            "league": {"self_play": 0.5, "bots": ["random"]},
            "eval": {"every": 1, "games": 2, "opponents": ["random"]},
            "run_dir": str(tmp_path / "run"),
        }
    )
    selfplay.train(cfg, console=Console(quiet=True))
    out = capsys.readouterr().out.splitlines()  # stdout is no terminal here: the lines go there
    rollout = [line for line in out if line.startswith("step 1 rollout: ")]
    assert (
        rollout[0].startswith("step 1 rollout: 0/4 matches, 0.0%, ") and " tokens (" in rollout[0]
    )
    assert any(line.startswith("eval step 0 (report): 0/2 matches, ") for line in out)
    assert any(line.startswith("eval step 1 (report): 0/2 matches, ") for line in out)


def test_the_console_prints_bot_names_as_written():
    """rich's emoji codes would print the opponent `mcts:100` as `mcts💯` (seen in a training log)."""
    from core.console import make_console

    console = make_console(120, record=True, file=io.StringIO())
    console.print("eval connect_four vs mcts:100: non-losing 0.00 | cfr:thumbs_up:")
    text = console.export_text()
    assert "vs mcts:100: non-losing" in text and "cfr:thumbs_up:" in text
