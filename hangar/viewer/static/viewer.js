// hangar view: refreshes a sweep's page while it runs. No data from a trial is ever
// turned into markup here: the server renders (and escapes) the fragments it swaps in.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const sweep = encodeURIComponent(live.dataset.sweep);
  const poll = Math.max(1, parseFloat(live.dataset.poll || "3")) * 1000;
  let rows = live.dataset.rows, latest = live.dataset.latest;
  async function part(name) {
    const url = "/sweeps/" + sweep + "/part/" + name + window.location.search;
    const response = await fetch(url, {credentials: "same-origin"});
    if (response.ok) document.getElementById(name).innerHTML = await response.text();
  }
  async function tick() {
    try {
      const response = await fetch("/api/sweeps/" + sweep + "/state", {credentials: "same-origin"});
      if (response.ok) {
        const state = await response.json();
        const stale = document.getElementById("stale");
        if (String(state.rows) !== rows || state.latest !== latest || stale) {
          rows = String(state.rows);
          latest = state.latest;
          live.classList.add("updating");
          await part("trials");
          await part("summary");
          live.classList.remove("updating");
          live.dataset.rows = rows;
        }
      }
    } catch (e) { /* the viewer stopped: try again later */ }
    window.setTimeout(tick, poll);
  }
  window.setTimeout(tick, poll);
})();
