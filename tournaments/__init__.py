"""Tournaments and ratings, written once over "players" and a "compare two players" function.

    rounds.py    the round protocol: a format is a generator of rounds of Pairings
    formats.py   round robin, Swiss, and `make_format(name, players, **options)`
    bracket.py   seeded single elimination (ArenaRL) and double elimination
    seeding.py   anchor comparisons and seeding orders
    adaptive.py  Swiss rounds, then pairings chosen by information, with a stopping rule
    tables.py    the formats of games of N seats: round robin, Swiss and adaptive by tables
    judge.py     rank a group of trajectories with a judge (ArenaRL's advantages from the
                 ranks: `training.advantages.ranks_to_advantages`)
    ratings.py   Bradley-Terry with CIs (Elo scale), OpenSkill, alpha-rank, Nash averaging
    plackett_luce.py  Plackett-Luce over finishing orders of N players or teams, the same CIs
    config.py    the tournament YAML
    store.py     the SQLite store (WAL) that survives kill -9
    run.py       format rounds -> matches -> store, resumable
    matches.py   a round's matches played through the arena (`arena_play_matches`)
    people.py    games people played in the browser against a tournament's players, rated in
    report.py    terminal leaderboard and static HTML report
    sim.py       simulated Bradley-Terry players (tests, benchmarks)

The arena front end is `arena tournament CONFIG` (`cli/commands/tournament.py`).
"""
