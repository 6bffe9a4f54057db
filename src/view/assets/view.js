// helmbench view: keyboard shortcuts on a test case page and the live
// runs list. Served from the binary; never writes HTML (text only).
"use strict";

function typing(target) {
  const tag = target && target.tagName;
  return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
}

// p pass, f fail, s skip (on the focused criterion); j or → next, k or ← previous.
document.addEventListener("keydown", function (e) {
  if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
  let el = null;
  if (e.key === "p" || e.key === "f" || e.key === "s") {
    el = document.querySelector('[data-key="' + e.key + '"]');
  } else if (e.key === "j" || e.key === "ArrowRight") {
    el = document.querySelector('a[rel="next"]');
  } else if (e.key === "k" || e.key === "ArrowLeft") {
    el = document.querySelector('a[rel="prev"]');
  }
  if (el) {
    e.preventDefault();
    el.click();
  }
});

// The runs page: while a run is running, poll its rows and update their text.
function pollRuns(table) {
  const url = table.getAttribute("data-poll");
  const fields = ["status", "progress", "passed", "errors", "blocked", "spend"];
  function running() {
    return table.querySelector('tr[data-status="running"]') !== null;
  }
  function tick() {
    if (!running()) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (lines) {
        lines.forEach(function (l) {
          const row = table.querySelector('tr[data-run-id="' + Number(l.run_id) + '"]');
          if (!row) return;
          row.setAttribute("data-status", String(l.status));
          fields.forEach(function (f) {
            const cell = row.querySelector('[data-field="' + f + '"]');
            if (!cell) return;
            const target = cell.querySelector("span, a") || cell;
            target.textContent = f === "failed" ? l[f] + " failed" : String(l[f]);
            if (f === "status" && target !== cell) target.className = "badge " + String(l.status);
          });
          const failed = row.querySelector('[data-field="failed"] a');
          if (failed) failed.textContent = l.failed + " failed";
        });
      })
      .catch(function () {})
      .finally(function () { setTimeout(tick, 2000); });
  }
  setTimeout(tick, 2000);
}

document.addEventListener("DOMContentLoaded", function () {
  const table = document.querySelector("table[data-poll]");
  if (table) pollRuns(table);
  const focused = document.querySelector("form.label[data-focus]");
  if (focused && location.hash === "#label") focused.scrollIntoView({ block: "center" });
});
