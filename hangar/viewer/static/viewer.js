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

// Sortable tables: a click on a header sorts by that column (again: the other way). Rows
// are only moved, never rebuilt; a row of class "uncounted" stays under its group's row.
// The live refresh replaces tables: a listener on the document serves the new ones too.
(function () {
  function key(row, index, numeric) {
    const cell = row.cells[index];
    if (!cell) return numeric ? -Infinity : "";
    const raw = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
    if (!numeric) return raw.toLowerCase();
    const n = parseFloat(String(raw).replace(/[^0-9.eE+-]/g, ""));
    return isNaN(n) ? -Infinity : n;
  }
  document.addEventListener("click", function (event) {
    const th = event.target.closest("table.sortable th");
    if (!th) return;
    const table = th.closest("table");
    const header = th.parentElement;
    const index = Array.prototype.indexOf.call(header.children, th);
    const numeric = th.dataset.type === "number";
    const rows = Array.from(table.rows).filter(function (r) { return r !== header; });
    const units = [];
    rows.forEach(function (r) {
      if (r.classList.contains("uncounted") && units.length) units[units.length - 1].push(r);
      else units.push([r]);
    });
    const down = th.dataset.sorted === "up";
    units.sort(function (a, b) {
      const x = key(a[0], index, numeric), y = key(b[0], index, numeric);
      return (x < y ? -1 : x > y ? 1 : 0) * (down ? -1 : 1);
    });
    Array.from(header.children).forEach(function (h) { delete h.dataset.sorted; });
    th.dataset.sorted = down ? "down" : "up";
    const parent = rows.length ? rows[0].parentElement : table;
    units.forEach(function (unit) { unit.forEach(function (r) { parent.appendChild(r); }); });
  });
})();
