"""Smoke tests of bench/tournament_efficiency.py: every format's comparison count, the
ordering a reader relies on (more comparisons, closer to the truth) at a small size, and
the adaptive format's `--quick` target table."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "tournament_efficiency",
    Path(__file__).resolve().parents[2] / "bench" / "tournament_efficiency.py",
)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_bench_counts_and_ordering(capsys):
    n = 16
    table = bench.main(["--sizes", str(n), "--trials", "30", "--spread", "3"])
    formats = [f for f in bench.FORMATS if f not in bench.ADAPTIVE]  # the default set
    assert table[n, "round_robin"]["matches"] == n * (n - 1) / 2
    assert table[n, "se_anchor"]["matches"] == 2 * n - 2  # ArenaRL: seeding + bracket
    assert (
        table[n, "se_prior"]["matches"]
        == table[n, "se_random"]["matches"]
        == table[n, "anchor"]["matches"]
        == n - 1
    )
    assert table[n, "swiss"]["matches"] == 4 * n / 2
    assert (
        3 * n - 3 <= table[n, "de_anchor"]["matches"] <= 3 * n - 2
    )  # seeding + 2N-2 (+1 on a reset)
    assert table[n, "prior"]["matches"] == 0
    tau = {f: table[n, f]["tau"] for f in formats}
    assert tau["round_robin"] > tau["se_anchor"] > tau["se_random"]
    # the oracle bound ranks the same kind of brackets: knowing every score beats the bracket's own order
    bound = table[n, "bound"]
    assert bound["posterior"] > bound["se_prior as ranked"]
    assert abs(bound["se_prior as ranked"] - tau["se_prior"]) < 0.1
    out = capsys.readouterr().out
    assert "claim at N=16" in out and "round_robin" in out and "bound at N=16" in out


def test_quick_adaptive_targets(capsys):
    table = bench.main(["--quick"])
    n = 16
    out = capsys.readouterr().out
    assert (
        "N = 16" in out
        and "spread 2.0" in out
        and "Gumbel" in out
        and "10 trials" in out
        and "win/loss only" in out
    )
    assert table[n, "adaptive"]["matches"] == round(2 * n * 4)  # the default budget, 2 N log2 N
    assert table[n, "adaptive_0.5rr"]["matches"] == n * (n - 1) // 4
    assert table[n, "adaptive_0.7rr"]["matches"] == int(0.7 * n * (n - 1) / 2)
    assert table[n, "adaptive_stop"]["matches"] <= table[n, "adaptive_0.7rr"]["matches"]
    # the adaptive rounds after the Swiss ones bring the ranking closer to the truth
    assert table[n, "adaptive_0.5rr"]["tau"] > table[n, "swiss"]["tau"]
    assert "adaptive vs round robin" in out
