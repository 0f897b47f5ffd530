// The match viewer: one turn shown at a time; the arrow keys (and the buttons) step the
// turns, Home and End jump, and the address's #turn=N says which turn is shown.
"use strict";
let turns = [], at = 0;

function show(k) {
  if (!turns.length) return;
  at = Math.max(0, Math.min(turns.length - 1, k));
  turns.forEach((t, i) => { t.hidden = i !== at; });
  document.querySelectorAll("#log li").forEach(li => {
    const i = Number(li.dataset.turn);
    li.hidden = i > at;
    li.classList.toggle("now", i === at);
  });
  document.getElementById("turn-no").textContent = at + 1;
  document.getElementById("prev").disabled = at === 0;
  document.getElementById("next").disabled = at === turns.length - 1;
  if (location.hash !== "#turn=" + at) history.replaceState(null, "", "#turn=" + at);
}

function fromHash() {
  const m = /^#turn=(\d+)$/.exec(location.hash);
  return m ? Number(m[1]) : 0;
}

document.addEventListener("DOMContentLoaded", () => {
  turns = [...document.querySelectorAll("section.turn")];
  if (!turns.length) return;
  document.getElementById("prev").addEventListener("click", () => show(at - 1));
  document.getElementById("next").addEventListener("click", () => show(at + 1));
  document.addEventListener("keydown", e => {
    if (e.target.closest && e.target.closest("input, textarea, select")) return;
    const step = {ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: turns.length - 1}[e.key];
    if (step === undefined) return;
    e.preventDefault();
    show(step);
  });
  window.addEventListener("hashchange", () => show(fromHash()));
  show(fromHash());
});
