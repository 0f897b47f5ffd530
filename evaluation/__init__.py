"""How an agent is evaluated: `arena eval`, and the functions behind it.

    suites.py          the suites (catalogue split -> games and opponents), EvalConfig, the
                       match plans (same seeds for every evaluated agent, every seat)
    run.py             play the plans through `arena.runner.play` (`play_suite`; in memory:
                       `evaluate`), with the tournament store for kill-and-resume (`run_eval`);
                       `arena eval`
    metrics.py         records -> per-cell rows (W/D/L, rates with Wilson CIs, mean return,
                       invalid/forfeit rates, tokens per move) and paired differences
    stats.py           Wilson, t and paired-bootstrap intervals
    exploitability.py  the agent's policy at every information state -> OpenSpiel NashConv
    analysis_rows.py   a policy's exploitability and perfect-play rows on one game (`arena eval`
                       and training's evaluation points alike)
    blunders.py        moves that lower the game-theoretic value (exact solver)
    social.py          cooperation, exploitation, welfare, fairness, the memory-1 profile
                       and the nearest named strategy; negotiation agreement and Pareto
                       efficiency
    commons.py         commons: rounds played, collapses, the catch as a share of the
                       sustainable optimum, the Gini index of the catches
    codewords.py       codewords: win rate by team and role, words found per clue, assassin
                       and clue-rule violation rates
    report.py          eval.json, the terminal tables, the HTML page

From Python (the training loop's periodic evaluation, `training.periodic_eval.evaluate`, is this):

    from evaluation.metrics import summary
    from evaluation.run import evaluate
    from evaluation.suites import suite

    cells = evaluate(policy, suite("held_out"), matches=100, seed=1_000_000)  # one Cell per (game, opponent, seat) and pooled
    rows = summary(cells)                                                      # one flat row per (game, opponent)
"""
