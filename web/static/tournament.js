// The live tournament page: poll the leaderboard's JSON every second; when the match count
// changes, fetch this page again and swap in its leaderboard (and, on the first page of an
// unfiltered list, its matches): the server renders both, this script only moves them.
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

async function refreshSections(live) {
  const html = await (await fetch(location.href, {credentials: "same-origin"})).text();
  const doc = new DOMParser().parseFromString(html, "text/html");
  const swap = id => { const fresh = doc.getElementById(id); if (fresh) document.getElementById(id).replaceWith(fresh); };
  swap("leaderboard-section");
  if (live.dataset.page === "0" && live.dataset.filtered === "0") swap("matches-section");
  wireSorting();
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
  if (live) setTimeout(() => poll(live), POLL_MS);
});
