"""`arena web RUNS_DIR`: one web app over a runs folder, for a browser on this machine.

    paths.py         what the app finds under RUNS_DIR, and URL paths that cannot leave it
    standings.py     a tournament's leaderboard as it stands, refitted only when a match lands
    ratings.py       beside it: rating against training step, the win-rate heat map, other ratings
    trajectories.py  one match's record out of a tournament's JSONL, by a byte-offset index
    replay.py        a recorded match turn by turn: views, replies, moves, boards
    curves.py        training runs' curves (reward, evaluation rates, exploitability) as data
    play.py          a game in the browser: the person's seat as an agent, the others by agents
    play_routes.py   the play pages and their JSON endpoints (/play, /api/play/...)
    auth.py          `--api-key`: a login cookie, `?key=` once, or `Authorization: Bearer`
    app.py           the Starlette app: pages, JSON endpoints, the packaged templates and static files

The pages are rendered on the server (Jinja2, `web/templates/`); the little JavaScript and
CSS they use ship in `web/static/`: no build step, nothing fetched from the network.
"""
