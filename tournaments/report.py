"""Tournament reports: a terminal leaderboard and a static HTML page.

    rows = leaderboard(result)                 # list[Row], in the format's final order
    print_leaderboard(result)                  # rich table: rank, rating with CI, rank range, W/D/L, games
    write_html(result, "runs/t/tournament.html")

The HTML page needs nothing but a browser (figures are inline base64 PNGs, the little
JavaScript is inline): a sortable leaderboard, the bracket drawn (elimination
formats) or the rounds (others), a win-rate heat map, the ratings with their confidence
intervals, other views of the same games (OpenSkill, alpha-rank, Nash averaging), and
every match's replay turn by turn (prompt, reply, move), read from the trajectory JSONL
(`core.records.read_jsonl`). The page lists the matches 100 at a time from one short
row each and draws a replay when it is opened; the replays sit inside the page up to
`INLINE_REPLAYS` bytes, beyond that in script files beside it (see `write_html`), so a
10,000-match tournament's page stays ~1 MB.

The rank is the format's ranking (`Outcome.order`: points, bracket exit, tie-breaks); the
rating is Bradley-Terry over every match played (`TournamentResult.ratings`), so the two
can disagree where a format decides on few games.

Games of N seats, or with teams, are rated by Plackett-Luce over the finishing orders; their
report adds how often each player finished in each place (`finishing_positions`) and each
seat's results (`seat_results`), and its win rates are head to head: the share of the
matches of two players in which the row player finished above the column player.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

import numpy as np
from rich.table import Table

import games
from core.console import make_console
from core.records import read_jsonl
from tournaments.ratings import (
    alpha_rank,
    nash_average,
    openskill_ratings,
    win_matrix,
    win_rates,
)
from tournaments.run import TournamentResult, pairwise


@dataclass
class Row:
    """One leaderboard line."""

    rank: int  # 1-based position in the format's final order
    player: str
    elo: float  # Bradley-Terry rating on the Elo scale
    lo: float  # confidence interval (nan without games)
    hi: float
    wins: int  # matches won / drawn / lost
    draws: int
    losses: int
    games: int  # matches played
    points: float  # the format's points (see points_note)
    mean_return: dict[str, float] = field(default_factory=dict)  # game -> mean return
    max_points: float = 0.0  # the most points its games (and Swiss byes) could have made
    rank_lo: int = 0  # the rank range its rating allows (simultaneous over the players; 0 = none)
    rank_hi: int = 0


def leaderboard(result: TournamentResult) -> list[Row]:
    """Rows in the format's final order."""
    wdl = {p: [0, 0, 0] for p in result.config.players}
    returns: dict = defaultdict(list)
    for spec in result.schedule:
        r = result.results.get(spec.match_id)
        if r is None:
            continue
        for p in spec.seats:
            wdl[p][("win", "draw", "loss").index(r.outcome[p])] += 1
            returns[p, spec.game].append(r.scores[p])
    games = list(dict.fromkeys(s.game for s in result.schedule))
    rows = []
    for i, p in enumerate(result.outcome.order):
        rt = result.ratings[p]
        w, d, l_ = wdl[p]
        mean = {g: float(np.mean(returns[p, g])) for g in games if returns[p, g]}
        stats = result.outcome.stats.get(p, {})
        played = stats.get(
            "games", (w + d + l_) / len(result.config.games)
        )  # a tournament so far: its matches
        most = played + stats.get("byes", 0) * result.config.games_per_pairing
        rows.append(
            Row(
                i + 1,
                p,
                rt.elo,
                rt.lo,
                rt.hi,
                w,
                d,
                l_,
                w + d + l_,
                float(stats.get("points", 0.0)),
                mean,
                float(most),
                rt.rank_lo,
                rt.rank_hi,
            )
        )
    return rows


def points_note(result: TournamentResult, rows: list[Row] | None = None) -> str:
    """What the points column counts, in one sentence with this tournament's numbers."""
    cfg = result.config
    n = len(cfg.games)
    per = (
        ""
        if n == 1
        else f", divided by the config's {n} games (each repeat of a pairing plays every game once)"
    )
    by = "" if n == 1 else f" / {n}"
    if not pairwise(cfg):
        return (
            "points: per match, the share of the other sides a player finished above (level: half), "
            "so 1 for first and 0 for last; summed over its matches, of the most they could make"
            + ("; a round sat out counts ½ a match" if cfg.format == "swiss" else "")
            + "."
        )
    text = f"points: win 1, draw ½, loss 0 per match{per}: (W + D/2){by}, of the most its matches could make"
    if cfg.format == "swiss":
        text += "; a bye counts as a won pairing, seeding matches as nothing"
    rows = leaderboard(result) if rows is None else rows
    top = next((r for r in rows if r.games), None)
    if top is not None and math.isclose((top.wins + top.draws / 2) / n, top.points, abs_tol=1e-9):
        text += f"; e.g. {top.player}: ({top.wins} + {top.draws}/2){by} = {top.points:.4g} of {top.max_points:.4g}"
    if result.outcome.bracket:
        text += "; the rank is where a player went out of the bracket, not its points"
    return text + "."


def finishing_positions(result: TournamentResult) -> dict[str, list[int]]:
    """Player -> how often it finished 1st, 2nd, ... (tied sides share the better place)."""
    sides = max((len(f.sides()) for f in result.finishes()), default=2)
    counts = {p: [0] * sides for p in result.config.players}
    for f in result.finishes():
        for p, place in zip(f.seats, f.places()):
            counts[p][place - 1] += 1
    return counts


def seat_results(result: TournamentResult) -> dict[tuple[str, int], tuple[int, float, float]]:
    """(game, seat) -> (matches, mean points, mean return) of whoever sat there."""
    sums: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for f in result.finishes():
        for s, (pts, score) in enumerate(zip(f.points(), f.scores)):
            cell = sums[f.label, s]
            cell[0] += 1
            cell[1] += pts
            cell[2] += score
    return {k: (n, pts / n, score / n) for k, (n, pts, score) in sorted(sums.items())}


def _ordinal(k: int) -> str:
    return f"{k}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(k if k < 20 else k % 10, 'th') }"


def print_finishes(result: TournamentResult, console) -> None:
    """The finishing-position and per-seat tables of a tournament of N seats or teams."""
    counts = finishing_positions(result)
    table = Table(title="finishing positions (matches; tied sides share the better place)")
    table.add_column("player", overflow="fold")
    for k in range(len(next(iter(counts.values())))):
        table.add_column(_ordinal(k + 1), justify="right")
    for p in result.outcome.order:
        table.add_row(p, *map(str, counts[p]))
    console.print(table)
    seats = Table(title="per seat")
    for col in ("game", "seat", "matches", "mean points", "mean return"):
        seats.add_column(col, justify="left" if col == "game" else "right")
    for (game, seat), (n, pts, score) in seat_results(result).items():
        seats.add_row(game, str(seat), str(n), f"{pts:.3f}", f"{score:+.3f}")
    console.print(seats)


def _points(row: Row) -> str:
    return f"{row.points:.4g} of {row.max_points:.4g}"


def _end(x: float) -> str:
    return f"{x:.0f}" if math.isfinite(x) else ("∞" if x > 0 else "-∞")


def _interval(row: Row) -> str:
    return "" if math.isnan(row.lo) else f"[{_end(row.lo)}, {_end(row.hi)}]"


def _ci(row: Row, reference: str | None) -> str:
    if row.player == reference:
        return f"{row.elo:.0f} (reference)"
    return f"{row.elo:.0f} {_interval(row)}".rstrip()


def _rank_range(row: Row) -> str:
    if not row.rank_lo:
        return ""
    return str(row.rank_lo) if row.rank_lo == row.rank_hi else f"{row.rank_lo}-{row.rank_hi}"


def seat_note(result: TournamentResult) -> str:
    """The first mover's advantage per game, as fitted with the ratings."""
    if not result.seat:
        return ""
    terms = [
        f"{g} {h.elo:+.0f}" + ("" if math.isnan(h.lo) else f" [{h.lo:+.0f}, {h.hi:+.0f}]")
        for g, h in result.seat.items()
    ]
    if result.config.sides:
        firsts = ", ".join(f"{g}: {first_team(g)}" for g in result.seat)
        return f"the first side's advantage ({firsts}; fitted with the ratings, which are corrected for it), Elo: {', '.join(terms)}"
    if result.config.seats() > 2:
        return f"each seat's advantage over the last seat (fitted with the ratings, which are corrected for it), Elo: {', '.join(terms)}"
    return f"first mover's advantage (fitted with the ratings, which are corrected for it), Elo: {', '.join(terms)}"


def first_team(game: str) -> str:
    """The team a game played by sides puts on side 0 (its first `TEAMS` name)."""
    return (getattr(games.make(game).unwrapped, "TEAMS", ()) or ("team 0",))[0]


def rating_note(result: TournamentResult) -> str:
    """What the rating and rank-range columns are, with this tournament's seat terms."""
    ro = result.config.rating
    pinned = f"{ro.reference} = 1000" if ro.reference else "mean of the field = 1000"
    model = "Bradley-Terry" if pairwise(result.config) else "Plackett-Luce over finishing orders"
    text = f"rating: {model} (Elo scale, {pinned}), {int(ro.level * 100)}% {ro.ci} CI"
    if result.seat:
        text += f"; {seat_note(result)}"
    if ro.ci:
        text += (
            f"; rating rank: the ranks the rating differences allow ({int(ro.level * 100)}% confidence for each player's range); "
            "an unbeaten player's interval has no upper end"
        )
    return text + "."


def print_leaderboard(result: TournamentResult, console=None) -> None:
    """A tournament's leaderboard as a rich table."""
    console = console or make_console()
    cfg = result.config
    ro = cfg.rating
    title = f"{cfg.name}: {cfg.format}, {len(result.results)} matches"
    rows = leaderboard(result)
    table = Table(title=title)
    for col in ("rank", "player", "rating [CI]", "rating rank", "W", "D", "L", "games", "points"):
        table.add_column(
            col,
            justify="left" if col == "player" else "right",
            overflow="fold" if col == "player" else "ellipsis",  # a long name wraps, not cut
        )
    for r in rows:
        table.add_row(
            str(r.rank),
            r.player,
            _ci(r, ro.reference),
            _rank_range(r),
            str(r.wins),
            str(r.draws),
            str(r.losses),
            str(r.games),
            _points(r),
        )
    console.print(table)
    if not pairwise(cfg):
        print_finishes(result, console)
    for note in (rating_note(result), points_note(result, rows)):  # wrapped, also when piped
        console.print(note, soft_wrap=False, markup=False)


def leaderboard_json(result: TournamentResult) -> dict:
    """The leaderboard as data: the tournament's name, format and match count, one row per
    player (`Row`'s fields; an unbounded interval end is null) and each game's first-mover
    advantage in Elo with its interval."""

    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    rows = []
    for r in leaderboard(result):
        row = asdict(r)
        row.update(elo=num(r.elo), lo=num(r.lo), hi=num(r.hi))
        rows.append(row)
    cfg = result.config
    return {
        "name": cfg.name,
        "format": cfg.format,
        "matches": len(result.results),
        "rating_reference": cfg.rating.reference,
        "players": rows,
        "first_mover_elo": {
            g: {"elo": num(a.elo), "lo": num(a.lo), "hi": num(a.hi), "games": a.games}
            for g, a in result.seat.items()
        },
    } | ({} if pairwise(cfg) else _finishes_json(result))


def _finishes_json(result: TournamentResult) -> dict:
    """The finishing positions and per-seat results of a tournament of N seats or teams."""
    return {
        "finishing_positions": finishing_positions(result),
        "seats": [
            {"game": g, "seat": s, "matches": n, "mean_points": pts, "mean_return": score}
            for (g, s), (n, pts, score) in seat_results(result).items()
        ],
    }


def write_json(result: TournamentResult, path: str | Path) -> None:
    """Write `leaderboard_json` to `path` (replaced in one piece)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(leaderboard_json(result), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --- figures --------------------------------------------------------------------------------


def png_base64(fig) -> str:
    """A matplotlib figure as base64 PNG for an inline <img> (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def winrate_figure(result: TournamentResult) -> str:
    """Heat map of the share of points each row player took from each column player."""
    import matplotlib  # start-up time: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    players = result.outcome.order
    pts, cnt = win_matrix(result.games(), players)
    with np.errstate(invalid="ignore", divide="ignore"):
        P = np.where(cnt > 0, pts / np.maximum(cnt, 1), np.nan)
    n = len(players)
    size = max(3.5, 0.55 * n + 1.5)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(np.ma.masked_invalid(P), cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_facecolor("#dddddd")
    ax.set_xticks(range(n), players, rotation=45, ha="right")
    ax.set_yticks(range(n), players)
    if n <= 16:
        for i in range(n):
            for j in range(n):
                if cnt[i, j]:
                    ax.text(
                        j,
                        i,
                        f"{P[i, j]:.2f}\n({int(cnt[i, j])})",
                        ha="center",
                        va="center",
                        fontsize=7,
                    )
    ax.set_xlabel("opponent")
    ax.set_title("win rate of row vs column (draw = 1/2; games)")
    fig.colorbar(im, ax=ax, fraction=0.046)
    return png_base64(fig)


def rating_figure(result: TournamentResult) -> str:
    """Ratings with their confidence intervals, best on top."""
    import matplotlib  # start-up time: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: matplotlib

    rows = sorted(leaderboard(result), key=lambda r: r.elo)
    fig, ax = plt.subplots(figsize=(6.5, 0.4 * len(rows) + 1.2))
    y = np.arange(len(rows))
    elo = np.array([r.elo for r in rows])
    lo = np.array([r.lo if not math.isnan(r.lo) else r.elo for r in rows])
    hi = np.array([r.hi if not math.isnan(r.hi) else r.elo for r in rows])
    finite = np.concatenate([elo, lo[np.isfinite(lo)], hi[np.isfinite(hi)]])
    margin = 0.15 * (finite.max() - finite.min()) + 50
    left, right = (
        finite.min() - margin,
        finite.max() + margin,
    )  # an unbounded end: drawn to the edge, with an arrow
    ax.errorbar(
        elo, y, xerr=[elo - np.maximum(lo, left), np.minimum(hi, right) - elo], fmt="o", capsize=3
    )
    ax.plot(np.full(np.isinf(hi).sum(), right), y[np.isinf(hi)], ">", color="C0")
    ax.plot(np.full(np.isinf(lo).sum(), left), y[np.isinf(lo)], "<", color="C0")
    ax.set_yticks(y, [r.player for r in rows])
    ax.axvline(1000, color="gray", lw=0.8, ls=":")
    ro = result.config.rating
    ax.set_xlabel(f"Bradley-Terry rating, Elo scale ({int(ro.level * 100)}% {ro.ci} CI)")
    ax.grid(axis="x", alpha=0.3)
    return png_base64(fig)


# --- HTML -----------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{margin-bottom:.2em} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:.5em 0} th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3;cursor:pointer} td.l,th.l{text-align:left}
.bracket{display:flex;gap:14px;overflow-x:auto;padding:6px 0}
.col{display:flex;flex-direction:column;justify-content:space-around;min-width:150px}
.col h4{margin:0 0 4px 0;text-align:center;color:#555}
.m{border:1px solid #999;border-radius:4px;margin:5px 0;font-size:13px;background:#fafafa}
.m div{padding:2px 6px;display:flex;justify-content:space-between} .m .w{font-weight:bold;background:#e3f4e3}
.m .bye{color:#999;font-style:italic}
details.replay{border:1px solid #ddd;border-radius:4px;margin:4px 0;padding:3px 8px}
details.replay summary{cursor:pointer}
.turn{border-left:3px solid #aac;margin:6px 0 6px 6px;padding:2px 8px}
.turn.bad{border-left-color:#d88}
pre{white-space:pre-wrap;background:#f6f6f6;padding:4px 6px;margin:3px 0;font-size:12px}
.k{color:#666;font-size:12px}
"""

JS = """
function sortTable(th){
  const table=th.closest('table'), idx=[...th.parentNode.children].indexOf(th);
  const rows=[...table.tBodies[0].rows], asc=th.dataset.asc!=='1';
  rows.sort((a,b)=>{const x=a.cells[idx].dataset.v??a.cells[idx].textContent, y=b.cells[idx].dataset.v??b.cells[idx].textContent;
    const nx=parseFloat(x), ny=parseFloat(y);
    const c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y); return asc?c:-c;});
  th.dataset.asc=asc?'1':'0'; rows.forEach(r=>table.tBodies[0].appendChild(r));
}
// Matches: MATCHES holds one row per match [id, game, a, b, score a, score b, outcome a, outcome b, label, seed, replay page];
// a page of PAGE rows is drawn at a time, a replay is drawn when opened, from REPLAYS[page] (inline, or a script beside the page).
const PAGE=100, REPLAYS={}, WAITING={};
let view=[], at=0;
function esc(s){return String(s).replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#x27;'}[c]));}
function sg(x){x=Number(Number(x).toPrecision(6)); return (x>=0?'+':'')+x;}
function replayPage(k,data){REPLAYS[k]=data; (WAITING[k]||[]).forEach(f=>f()); delete WAITING[k];}
function withPage(k,f){
  if(REPLAYS[k]){f();return;} if(WAITING[k]){WAITING[k].push(f);return;}
  WAITING[k]=[f]; const s=document.createElement('script'); s.src=REPLAY_DIR+'/'+String(k).padStart(4,'0')+'.js';
  s.onerror=()=>{REPLAYS[k]=null; (WAITING[k]||[]).forEach(f=>f()); delete WAITING[k];}; document.head.appendChild(s);
}
function turnHtml(t){
  const flags=[]; if(t.r) flags.push(t.r+(t.r===1?' retry':' retries')); if(t.f) flags.push('fallback: '+t.f);
  let h='<b>#'+t.i+'</b> '+esc(t.p)+' ('+esc(t.a)+') plays <b class="move">'+(esc(t.m)||'(nothing)')+'</b>';
  if(flags.length) h+=' <span class="k">['+esc(flags.join(', '))+']</span>';
  if(t.s!==undefined) h+='<details><summary class="k">system prompt</summary><pre>'+esc(t.s)+'</pre></details>';
  if(t.q!==undefined) h+='<div class="k">prompt</div><pre class="prompt">'+esc(t.q)+'</pre>';
  (t.at||[]).forEach(([c,e],k)=>{h+='<div class="k">'+(t.at.length===1?'reply':'reply '+(k+1))+(e?' — rejected: '+esc(e):'')+'</div><pre class="reply">'+esc(c)+'</pre>';});
  if(t.c!==undefined) h+='<div class="k">reply</div><pre class="reply">'+esc(t.c)+'</pre>';
  return '<div class="turn'+(t.v===false?' bad':'')+'">'+h+'</div>';
}
function fillReplay(d){
  if(d.dataset.filled) return; d.dataset.filled='1';
  const m=MATCHES[+d.dataset.i];
  withPage(m[10],()=>{
    const page=REPLAYS[m[10]], r=page&&page[m[0]];
    let body=page===null?'<p class="k">replay file '+esc(REPLAY_DIR)+'/'+String(m[10]).padStart(4,'0')+'.js not found beside the report</p>'
      :!r?'<p class="k">no trajectory stored for this match</p>':(r.turns.map(turnHtml).join('')||'<p class="k">no decisions</p>');
    if(r&&r.error) body+='<p class="k">aborted: '+esc(r.error)+'</p>';
    d.querySelector('.body').innerHTML=body;
  });
}
function renderMatches(){
  const list=document.getElementById('matches'), rows=[];
  for(const i of view.slice(at,at+PAGE)){
    const [id,game,a,b,sa,sb,oa,ob,label,seed]=MATCHES[i], seats=MATCHES[i][11]||[[a,sa,oa],[b,sb,ob]];
    rows.push('<details class="replay" data-i="'+i+'" data-match-id="'+esc(id)+'" data-game="'+esc(game)+'" data-players="'+seats.map(s=>esc(s[0])).join('|')+'">'
      +'<summary><b>'+esc(label)+'</b> '+esc(game)+': '+seats.map(([p,s,o])=>esc(p)+' ('+sg(s)+', '+o+')').join(' vs ')+'</summary>'
      +'<p class="k">match '+esc(id)+', seed '+seed+'; seats: '+seats.map((s,k)=>'player_'+k+' = '+esc(s[0])).join(', ')+'</p><div class="body"></div></details>');
  }
  list.innerHTML=rows.join('');
  list.querySelectorAll('details.replay').forEach(d=>d.addEventListener('toggle',()=>{if(d.open) fillReplay(d);}));
  document.getElementById('shown').textContent=(view.length?(at+1)+'-'+Math.min(at+PAGE,view.length):'0')+' of '+view.length+' matches shown ('+MATCHES.length+' in all)';
  document.getElementById('prev').disabled=at===0; document.getElementById('next').disabled=at+PAGE>=view.length;
}
function filterMatches(){
  const p=document.getElementById('fplayer').value, g=document.getElementById('fgame').value;
  view=[]; MATCHES.forEach((m,i)=>{if((!p||(m[11]||[[m[2]],[m[3]]]).some(s=>s[0]===p))&&(!g||m[1]===g)) view.push(i);}); at=0; renderMatches();
}
function openMatch(id){
  const i=MATCHES.findIndex(m=>m[0]===id); if(i<0) return;
  at=Math.floor(view.indexOf(i)/PAGE)*PAGE; renderMatches();
  const d=document.querySelector('details.replay[data-i="'+i+'"]'); d.open=true; fillReplay(d); d.scrollIntoView();
}
document.addEventListener('DOMContentLoaded',()=>{
  document.querySelectorAll('#leaderboard th').forEach(th=>th.addEventListener('click',()=>sortTable(th)));
  const fp=document.getElementById('fplayer'), fg=document.getElementById('fgame');
  const players=new Set(), games=new Set(); MATCHES.forEach(m=>{(m[11]||[[m[2]],[m[3]]]).forEach(s=>players.add(s[0])); games.add(m[1]);});
  [...players].sort().forEach(x=>fp.add(new Option(x,x))); [...games].sort().forEach(x=>fg.add(new Option(x,x)));
  fp.addEventListener('change',filterMatches); fg.addEventListener('change',filterMatches);
  document.getElementById('prev').addEventListener('click',()=>{at=Math.max(0,at-PAGE); renderMatches();});
  document.getElementById('next').addEventListener('click',()=>{at+=PAGE; renderMatches();});
  filterMatches();
  if(location.hash.startsWith('#match=')) openMatch(decodeURIComponent(location.hash.slice(7)));
  document.getElementById('shown').dataset.ms=Math.round(performance.now());  // ms from navigation to a drawn page
});
"""


def escape(x) -> str:
    """`x` as text safe inside HTML and attribute values."""
    return html.escape(str(x), quote=True)


def _invalid_replies(records: dict) -> dict:
    """Player -> (LLM turns whose first reply named no legal move, LLM turns)."""
    out: dict = defaultdict(lambda: [0, 0])
    for rec in records.values():
        for t in rec.turns:
            if t.messages:  # an LLM turn
                out[t.agent][1] += 1
                out[t.agent][0] += bool(t.attempts and t.attempts[0].error) or not t.valid
    return out


def _leaderboard_html(result: TournamentResult, records: dict) -> str:
    rows = leaderboard(result)
    invalid = _invalid_replies(records)
    games = list(dict.fromkeys(s.game for s in result.schedule))
    head = "".join(f"<th>{escape(h)}</th>" for h in ("rank",)) + '<th class="l">player</th>'
    head += "".join(
        f"<th>{escape(h)}</th>"
        for h in ("rating", "CI", "rating rank", "W", "D", "L", "games", "points")
    )
    head += "".join(f"<th>mean return: {escape(g)}</th>" for g in games)
    head += "<th>invalid first replies</th>" if invalid else ""
    body = []
    for r in rows:
        ci = "reference" if r.player == result.config.rating.reference else _interval(r)
        cells = [
            f"<td>{r.rank}</td>",
            f'<td class="l player">{escape(r.player)}</td>',
            f'<td data-v="{r.elo:.3f}">{r.elo:.0f}</td>',
            f'<td data-v="{r.lo if not math.isnan(r.lo) else r.elo:.3f}">{escape(ci)}</td>',
            f'<td class="rank-range" data-v="{r.rank_lo + r.rank_hi / 1000}">{_rank_range(r)}</td>',
            *(f"<td>{v}</td>" for v in (r.wins, r.draws, r.losses, r.games)),
            f'<td data-v="{r.points:.6g}">{_points(r)}</td>',
        ]
        cells += [
            f"<td>{r.mean_return[g]:+.2f}</td>" if g in r.mean_return else "<td></td>"
            for g in games
        ]
        if invalid:
            bad, n = invalid.get(r.player, (0, 0))
            cells.append(
                f'<td data-v="{bad / n if n else -1}">{bad}/{n} ({100 * bad / n:.0f}%)</td>'
                if n
                else "<td></td>"
            )
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _bracket_html(result: TournamentResult) -> str:
    """The bracket as columns of match boxes, one column per round label, per side."""
    matches = result.outcome.bracket or []
    seeds = {p: s.get("seed") for p, s in result.outcome.stats.items()}
    double = any(m.side == "L" for m in matches)
    sides = [
        ("W", "Winners' bracket" if double else ""),
        ("L", "Losers' bracket"),
        ("F", "Grand final"),
    ]
    out = []
    for side, title in sides:
        ms = [
            m
            for m in matches
            if m.side == side and not (m.id == "GF2" and m.a is None and m.b is None)
        ]
        if not ms:
            continue
        cols = []
        for label in dict.fromkeys(m.label for m in ms):
            boxes = []
            for m in (m for m in ms if m.label == label):
                lines = []
                for who, pts in (
                    (m.a, m.result.points_a if m.result else None),
                    (m.b, m.result.points_b if m.result else None),
                ):
                    if who is None:
                        lines.append('<div class="bye">bye</div>')
                        continue
                    seed = f"<span class=k>{seeds.get(who)}</span> " if seeds.get(who) else ""
                    score = "" if pts is None else f"{pts:.3g}"
                    cls = ' class="w"' if who == m.winner else ""
                    lines.append(
                        f"<div{cls}><span>{seed}{escape(who)}</span><span>{score}</span></div>"
                    )
                boxes.append(f'<div class="m" data-match="{escape(m.id)}">{"".join(lines)}</div>')
            cols.append(f'<div class="col"><h4>{escape(label)}</h4>{"".join(boxes)}</div>')
        heading = f"<h3>{escape(title)}</h3>" if title else ""
        out.append(f'{heading}<div class="bracket">{"".join(cols)}</div>')
    seeding = [rnd for rnd in result.outcome.rounds if rnd and all(p.label == "A" for p, _ in rnd)]
    if seeding:
        out.insert(
            0,
            "<h3>Seeding phase (vs the anchor)</h3>"
            + _rounds_html(result, seeding, "seeding-rounds"),
        )
    return f'<div id="bracket">{"".join(out)}</div>'


def _rounds_html(result: TournamentResult, rounds: list | None = None, id_: str = "rounds") -> str:
    rounds = result.outcome.rounds if rounds is None else rounds
    if not pairwise(result.config):
        return _table_rounds_html(rounds, id_)
    parts = []
    for k, rnd in enumerate(rounds):
        if not rnd:
            continue
        rows = "".join(
            f'<tr><td class="l">{escape(p.label)}</td><td class="l">{escape(p.a)}</td><td>{r.points_a:.3g} : {r.points_b:.3g}</td><td class="l">{escape(p.b)}</td><td>{r.games}</td></tr>'
            for p, r in rnd
        )
        parts.append(
            f"<details{' open' if len(rounds) <= 3 else ''}><summary>round {k + 1} ({len(rnd)} pairings)</summary>"
            f"<table><tr><th class=l>round</th><th class=l>player</th><th>points</th><th class=l>opponent</th><th>games</th></tr>{rows}</table></details>"
        )
    return f'<div id="{id_}">{"".join(parts)}</div>'


def _table_rounds_html(rounds: list, id_: str) -> str:
    """The rounds of a table format: each table's players, seat order of its first game, with
    the points each made."""
    parts = []
    for k, rnd in enumerate(rounds):
        rows = "".join(
            f'<tr><td class="l">{escape(t.label)}</td><td class="l">'
            + ", ".join(f"{escape(p)} {r.points(p):.3g}" for p in t.players)
            + f"</td><td>{r.games}</td></tr>"
            for t, r in rnd
        )
        parts.append(
            f"<details{' open' if len(rounds) <= 3 else ''}><summary>round {k + 1} ({len(rnd)} tables)</summary>"
            f"<table><tr><th class=l>round</th><th class=l>players and points</th><th>games</th></tr>{rows}</table></details>"
        )
    return f'<div id="{id_}">{"".join(parts)}</div>'


def _finishes_html(result: TournamentResult) -> str:
    """The finishing-position and per-seat tables, for a tournament of N seats or teams."""
    counts = finishing_positions(result)
    places = len(next(iter(counts.values())))
    head = (
        "<tr><th class=l>player</th>"
        + "".join(f"<th>{_ordinal(k + 1)}</th>" for k in range(places))
        + "</tr>"
    )
    body = "".join(
        f'<tr><td class="l">{escape(p)}</td>'
        + "".join(f"<td>{c}</td>" for c in counts[p])
        + "</tr>"
        for p in result.outcome.order
    )
    seats = "".join(
        f'<tr><td class="l">{escape(g)}</td><td>{s}</td><td>{n}</td><td>{pts:.3f}</td><td>{score:+.3f}</td></tr>'
        for (g, s), (n, pts, score) in seat_results(result).items()
    )
    return (
        f'<h2>Finishing positions</h2><table id="finishing-positions">{head}{body}</table>'
        "<p class=k>matches in which each player finished in each place; tied sides share the better place</p>"
        '<h2>Per seat</h2><table id="seat-results"><tr><th class=l>game</th><th>seat</th><th>matches</th>'
        f"<th>mean points</th><th>mean return</th></tr>{seats}</table>"
    )


def _openskill_matches(result: TournamentResult) -> list[dict]:
    """Each match as OpenSkill takes it: side (a player, or a tuple of teammates) -> points."""
    if pairwise(result.config):
        return [{a: s, b: 1 - s} for a, b, s in result.games()]
    out = []
    for f in result.finishes():
        points = f.points()
        out.append(
            {
                tuple(f.seats[s] for s in side) if len(side) > 1 else f.seats[side[0]]: points[
                    side[0]
                ]
                for side in f.sides()
            }
        )
    return out


def other_ratings(result: TournamentResult) -> dict:
    """Other views of the same games, as data: OpenSkill (Plackett-Luce, matches in order),
    alpha-rank (OpenSpiel, alpha=10) and Nash averaging (OpenSpiel) on the win-rate matrix,
    unplayed pairs at 1/2. One row per player in the format's order: `openskill` {mu, sigma,
    ordinal} (null without matches), `alpha_rank` mass, `nash` mixture weight and `payoff`
    against the mixture (null where that method failed; `notes` says why)."""
    players = result.outcome.order
    matches = _openskill_matches(result)
    skill = openskill_ratings(matches) if matches else {}
    P = win_rates(result.games(), players)
    notes, mass, mix, payoff = [], None, None, None
    try:
        mass = alpha_rank(P)
    except Exception as e:  # a degenerate matrix must not cost the whole report
        notes.append(f"alpha-rank failed: {e}")
    try:
        mix, payoff = nash_average(P)
    except Exception as e:
        notes.append(f"Nash averaging failed: {e}")
    rows = []
    for i, p in enumerate(players):
        s = skill.get(p)
        rows.append(
            {
                "player": p,
                "openskill": {
                    "mu": float(s.mu),
                    "sigma": float(s.sigma),
                    "ordinal": float(s.ordinal),
                }
                if s
                else None,
                "alpha_rank": float(mass[i]) if mass is not None else None,
                "nash": float(mix[i]) if mix is not None else None,
                "payoff": float(payoff[i]) if payoff is not None else None,
            }
        )
    return {"players": rows, "notes": notes}


def _other_ratings_html(result: TournamentResult) -> str:
    data = other_ratings(result)
    rows = []
    for r in data["players"]:
        s = r["openskill"]
        cells = [
            f'<td class="l">{escape(r["player"])}</td>',
            f"<td>{s['mu']:.1f} ± {s['sigma']:.1f}</td><td>{s['ordinal']:.1f}</td>"
            if s
            else "<td></td><td></td>",
            f"<td>{r['alpha_rank']:.3f}</td>" if r["alpha_rank"] is not None else "<td></td>",
            f"<td>{r['nash']:.3f}</td><td>{r['payoff']:+.3f}</td>"
            if r["nash"] is not None
            else "<td></td><td></td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = (
        "<tr><th class=l>player</th><th>OpenSkill μ ± σ</th><th>ordinal μ-3σ</th><th>alpha-rank mass</th>"
        "<th>Nash mixture</th><th>payoff vs Nash</th></tr>"
    )
    note = "".join(f"<p class=k>{escape(n)}</p>" for n in data["notes"])
    return (
        f'<table id="other-ratings">{head}{"".join(rows)}</table>{note}'
        "<p class=k>OpenSkill (Plackett-Luce, matches in order); alpha-rank (OpenSpiel, alpha=10) and Nash averaging "
        "(OpenSpiel) on the win-rate matrix, unplayed pairs at 1/2: a cycle among players shows as mass or Nash "
        "support spread over them, where a single rating would order them.</p>"
    )


def _records(result: TournamentResult) -> dict:
    """match_id -> MatchRecord of the tournament's matches, from its JSONL."""
    path = Path(result.jsonl_path)
    if not path.exists():
        return {}
    return {r.match_id: r for r in read_jsonl(path) if r.match_id in result.results}


INLINE_REPLAYS = 2_000_000  # bytes of replay data kept inside the page; beyond that, pages of replays go beside it
REPLAY_PAGE = 200  # matches per replay file beside the page


def _script_json(x) -> str:
    """JSON to embed in a <script> element (no "</" that could close it)."""
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")


def _match_rows(result: TournamentResult) -> list[list]:
    """One row per played match, in schedule order: [id, game, a, b, score a, score b, outcome a,
    outcome b, label, seed, replay page], a, b the players of seats 0 and 1; a match of more
    seats adds [[player, score, outcome], ...] seat by seat. The page is filled in by
    `_replay_pages`."""
    rows = []
    for spec in result.schedule:
        res = result.results.get(spec.match_id)
        if res is None:
            continue
        seats = [[p, res.scores[p], res.outcome[p]] for p in spec.seats]
        (a, sa, oa), (b, sb, ob) = seats[:2]
        rows.append([spec.match_id, spec.game, a, b, sa, sb, oa, ob, spec.label, spec.seed, 0])
        if len(seats) > 2:
            rows[-1].append(seats)
    return rows


def _turn_data(t) -> dict:
    """What a replay shows of a turn (keys kept short: a 10,000-match report holds tens of thousands)."""
    d = {"i": t.index, "p": t.player, "a": t.agent, "m": t.move}
    if not t.valid:
        d["v"] = False
    if t.retries:
        d["r"] = t.retries
    if t.fallback:
        d["f"] = t.fallback
    if t.messages:
        system = [m for m in t.messages if m.get("role") == "system"]
        prompt = next((m for m in t.messages if m.get("role") == "user"), None)
        if system:
            d["s"] = system[0]["content"]
        if prompt is not None:
            d["q"] = prompt["content"]
        if t.attempts:
            d["at"] = [[att.completion, att.error] for att in t.attempts]
        elif t.completion:
            d["c"] = t.completion
    return d


def _replay_pages(rows: list[list], records: dict, inline_limit: int) -> list[dict]:
    """Replays grouped into pages (setting each row's page): one page if they fit in
    `inline_limit` bytes of JSON, else REPLAY_PAGE matches a page."""
    replays = {
        rec.match_id: {
            "turns": [_turn_data(t) for t in rec.turns],
            **({"error": rec.error} if rec.error else {}),
        }
        for rec in records.values()
    }
    if len(_script_json(replays)) <= inline_limit:
        return [replays]
    pages = []
    for start in range(0, len(rows), REPLAY_PAGE):
        for row in rows[start : start + REPLAY_PAGE]:
            row[10] = len(pages)
        pages.append(
            {
                row[0]: replays[row[0]]
                for row in rows[start : start + REPLAY_PAGE]
                if row[0] in replays
            }
        )
    return pages


def write_html(
    result: TournamentResult, path: str | Path, inline_replays: int = INLINE_REPLAYS
) -> Path:
    """Write the report page; returns its path.

    The replays go inside the page while their JSON is at most `inline_replays` bytes;
    beyond that into `<page stem>.replays/0000.js, 0001.js, ...` beside it (REPLAY_PAGE
    matches each, loaded by a <script> element when a match is opened: a file:// page may
    not fetch() files, scripts it may load), and the page keeps one short row per match."""
    cfg = result.config
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    games = ", ".join(g.name + (f" {json.dumps(g.params)}" if g.params else "") for g in cfg.games)
    specs = "".join(
        f"<tr><td class=l>{escape(p)}</td><td class=l><code>{escape(json.dumps(s) if not isinstance(s, str) else s)}</code></td></tr>"
        for p, s in cfg.players.items()
    )
    records = _records(result)
    rows = _match_rows(result)
    pages = _replay_pages(rows, records, inline_replays)
    replay_dir = path.with_name(path.stem + ".replays")
    for old in replay_dir.glob("[0-9][0-9][0-9][0-9].js"):  # an earlier report's pages
        old.unlink()
    if len(pages) > 1:
        replay_dir.mkdir(exist_ok=True)
        for k, page in enumerate(pages):
            (replay_dir / f"{k:04d}.js").write_text(
                f"replayPage({k},{_script_json(page)});\n", encoding="utf-8"
            )
        inline = ""
        where = (
            f"{len(rows)} matches; open one to see its replay, read from the {len(pages)} files in {replay_dir.name}/ beside "
            "this page (keep them together)"
        )
    else:
        if replay_dir.is_dir() and not any(replay_dir.iterdir()):
            replay_dir.rmdir()
        inline = f"<script>replayPage(0,{_script_json(pages[0])});</script>"
        where = f"{len(rows)} matches; open one to see its replay"
    where += "; link to a match with #match=ID after the page's address"
    elim = bool(result.outcome.bracket)
    structure = _bracket_html(result) if elim else _rounds_html(result)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(cfg.name)} — tournament report</title>
<style>{CSS}</style><script>{JS}</script></head><body>
<h1>{escape(cfg.name)}</h1>
<p class="sub">{escape(cfg.format)} · {len(cfg.players)} players · games: {escape(games)} · {cfg.games_per_pairing} per pairing ·
{len(result.results)} matches · seed {cfg.seed}</p>
<h2>Leaderboard</h2>
{_leaderboard_html(result, records)}
<p class=k>rank: the format's final order; rating: Bradley-Terry maximum likelihood over every match (draw = half a win);
invalid first replies: LLM turns whose first reply named no legal move (retries and fallbacks then decided the move).
Click a column to sort.</p>
<p class=k id="rating-note">{escape(rating_note(result))}</p>
<p class=k id="points-note">{escape(points_note(result))}</p>
{"" if pairwise(cfg) else _finishes_html(result)}
<h2>{"Bracket" if elim else "Rounds"}</h2>
{structure}
<h2>Win rates</h2>
<img id="winrate" alt="win-rate matrix" src="data:image/png;base64,{winrate_figure(result)}">
<h2>Ratings with confidence intervals</h2>
<img id="ratings" alt="ratings with confidence intervals" src="data:image/png;base64,{rating_figure(result)}">
<h2>Other ratings</h2>
{_other_ratings_html(result)}
<h2>Players</h2>
<table>{specs}</table>
<h2 id="replays">Matches</h2>
<p>player <select id="fplayer"><option value="">all</option></select> game <select id="fgame"><option value="">all</option></select>
<button id="prev">‹ previous</button> <button id="next">next ›</button> <span id="shown" class="k"></span></p>
<p class=k id="replays-note">{escape(where)}.</p>
<div id="matches"></div>
<script>const MATCHES={_script_json(rows)}, REPLAY_DIR={_script_json(quote(replay_dir.name))};</script>
{inline}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
    return path
