// Similarity check page: follow a queued or running check and reload once it settled.
"use strict";

function followSimilarityRun() {
  const box = document.getElementById("similarity-run");
  if (!box || !["queued", "running"].includes(box.dataset.status)) return;
  const badge = document.getElementById("similarity-status");
  const tick = async () => {
    try {
      const response = await fetch(box.dataset.url, { headers: { "Accept": "application/json" }, credentials: "same-origin" });
      if (response.ok) {
        const run = await response.json();
        badge.textContent = run.status;
        badge.className = "badge sim-" + run.status;
        if (run.status === "done" || run.status === "failed") {
          window.location.reload();
          return;
        }
      }
    } catch (_) { /* try again at the next tick */ }
    setTimeout(tick, 1000);
  };
  tick();
}

document.addEventListener("DOMContentLoaded", followSimilarityRun);
