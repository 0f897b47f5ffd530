// The live tournament page: poll the leaderboard's JSON every second; when the match count
// changes, fetch this page again and swap in its leaderboard (and, on the first page of an
// unfiltered list, its matches): the server renders both, this script only moves them. It
// also draws the checkpoint players' rating against training step (curves.js's drawPanel,
// from /api/rating_steps) and fills the other ratings' table (from /api/other_ratings).
"use strict";
const POLL_MS = 1000;

function sortTable(th) {
  const table = th.closest("table"), idx = [...th.parentNode.children].indexOf(th);
  const rows = [...table.tBodies[0].rows], asc = th.dataset.asc !== "1";
  rows.sort((a, b) => {
    const x = a.cells[idx].dataset.v ?? a.cells[idx].textContent, y = b.cells[idx].dataset.v ?? b.cells[idx].textContent;
    const nx = parseFloat(x), ny = parseFloat(y);
    const c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
    return asc ? c : -c;
  });
  th.dataset.asc = asc ? "1" : "0";
  rows.forEach(r => table.tBodies[0].appendChild(r));
}

function wireSorting() {
  document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => sortTable(th)));
}

async function getJSON(path, live) {
  const r = await fetch(path + "?db=" + encodeURIComponent(live.dataset.db), {credentials: "same-origin"});
  return r.ok ? r.json() : null;
}

async function drawSteps(live) {
  const host = document.getElementById("rating-steps");
  if (!host) return;
  const data = await getJSON("/api/rating_steps", live);
  if (data && data.panel.series.length) host.replaceChildren(drawPanel(data.panel, 0));
}

const fmt = (x, d) => x === null ? "" : x.toFixed(d);
const OTHER_MS = 10000;  // the other ratings refit at most this often while matches land
let otherAt = 0;

async function fillOtherRatings(live) {
  const table = document.getElementById("other-ratings");
  if (!table || Date.now() - otherAt < OTHER_MS) return;
  otherAt = Date.now();
  const data = await getJSON("/api/other_ratings", live);
  if (!data) return;
  const rows = data.players.map(r => {
    const tr = document.createElement("tr"), s = r.openskill;
    const cells = [r.player, s ? `${fmt(s.mu, 1)} ± ${fmt(s.sigma, 1)}` : "", s ? fmt(s.ordinal, 1) : "",
      fmt(r.alpha_rank, 3), fmt(r.nash, 3), r.payoff === null ? "" : (r.payoff >= 0 ? "+" : "") + fmt(r.payoff, 3)];
    cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i === 0) td.className = "l"; });
    return tr;
  });
  table.tBodies[0].replaceChildren(...rows);
  table.parentNode.querySelectorAll("p.note").forEach(p => p.remove());
  for (const note of data.notes) { const p = document.createElement("p"); p.className = "k note"; p.textContent = note; table.after(p); }
}

function drawViews(live) {
  drawSteps(live);
  fillOtherRatings(live);
}

async function refreshSections(live) {
  const html = await (await fetch(location.href, {credentials: "same-origin"})).text();
  const doc = new DOMParser().parseFromString(html, "text/html");
  const swap = id => { const fresh = doc.getElementById(id); if (fresh) document.getElementById(id).replaceWith(fresh); };
  swap("leaderboard-section");
  if (live.dataset.page === "0" && live.dataset.filtered === "0") swap("matches-section");
  wireSorting();
  drawViews(live);
}

async function poll(live) {
  try {
    const url = "/api/leaderboard?db=" + encodeURIComponent(live.dataset.db);
    const r = await fetch(url, {credentials: "same-origin"});
    if (!r.ok) return;
    const data = await r.json();
    if (String(data.matches) !== live.dataset.matches) {
      await refreshSections(live);  // the count and the table come together, from the server
      live.dataset.matches = document.getElementById("match-count").textContent;
    }
    const state = document.getElementById("state");
    if (state) state.textContent = data.running ? "running" : (data.finished ? "finished" : "not running");
  } catch (e) {
    // the server restarting or the network down: the next poll tries again
  } finally {
    setTimeout(() => poll(live), POLL_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  wireSorting();
  const live = document.getElementById("live");
  if (live) {
    drawViews(live);
    setTimeout(() => poll(live), POLL_MS);
  }
});
