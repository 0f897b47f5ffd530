"""Smoke test of bench/tournament_efficiency.py: every format's comparison count, and the
ordering a reader relies on (more comparisons, closer to the truth) at a small size."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("tournament_efficiency", Path(__file__).resolve().parents[1] / "bench" / "tournament_efficiency.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_bench_counts_and_ordering(capsys):
    n = 16
    table = bench.main(["--sizes", str(n), "--trials", "30", "--spread", "3"])
    assert table[n, "round_robin"]["matches"] == n * (n - 1) / 2
    assert table[n, "se_anchor"]["matches"] == 2 * n - 2  # ArenaRL: seeding + bracket
    assert table[n, "se_prior"]["matches"] == table[n, "se_random"]["matches"] == table[n, "anchor"]["matches"] == n - 1
    assert table[n, "swiss"]["matches"] == 4 * n / 2
    assert 3 * n - 3 <= table[n, "de_anchor"]["matches"] <= 3 * n - 2  # seeding + 2N-2 (+1 on a reset)
    assert table[n, "prior"]["matches"] == 0
    tau = {f: table[n, f]["tau"] for f in bench.FORMATS}
    assert tau["round_robin"] > tau["se_anchor"] > tau["se_random"]
    # the oracle bound ranks the same kind of brackets: knowing every score beats the bracket's own order
    bound = table[n, "bound"]
    assert bound["posterior"] > bound["se_prior as ranked"]
    assert abs(bound["se_prior as ranked"] - tau["se_prior"]) < 0.1
    out = capsys.readouterr().out
    assert "target at N=16" in out and "round_robin" in out and "bound at N=16" in out
