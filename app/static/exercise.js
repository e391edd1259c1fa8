// Exercise page: submit code as JSON, then follow the submission's status over Server-Sent Events and show
// the result without reloading. Everything from the server is inserted with textContent, never innerHTML.
"use strict";

(function () {
  const SETTLED = new Set(["graded", "error"]);
  let source = null;

  function byId(id) { return document.getElementById(id); }

  function setText(id, text) {
    const element = byId(id);
    element.textContent = text;
    return element;
  }

  function formatPoints(value) {
    return value === null || value === undefined ? "–" : String(Math.round(value * 100) / 100);
  }

  function render(sub) {
    byId("result").hidden = false;
    const status = setText("result-status", sub.status);
    status.className = "badge status-" + sub.status;
    const verdict = setText("result-verdict", sub.verdict ? sub.verdict.replace("_", " ") : "");
    verdict.className = "badge verdict-" + (sub.verdict || "none");
    verdict.hidden = !sub.verdict;
    setText("result-score", sub.score === null ? "" : "Score " + formatPoints(sub.score) + " / " + formatPoints(sub.max_score));

    const message = setText("result-message", sub.message || "");
    message.hidden = !sub.message;

    const table = byId("result-tests");
    const body = table.querySelector("tbody");
    body.replaceChildren();
    for (const test of sub.tests || []) {
      const row = document.createElement("tr");
      row.className = "outcome-" + test.outcome;
      for (const text of [test.name, test.outcome, formatPoints(test.points) + " / " + formatPoints(test.max_points)]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      }
      row.children[2].className = "num";
      body.appendChild(row);
      if (test.message) {
        // The feedback gets a full-width row of its own: it is the part the learner needs to read.
        const feedback = document.createElement("tr");
        feedback.className = "feedback outcome-" + test.outcome;
        const cell = document.createElement("td");
        cell.colSpan = 3;
        cell.className = "test-message";
        cell.textContent = test.message;
        feedback.appendChild(cell);
        body.appendChild(feedback);
      }
    }
    table.hidden = !(sub.tests && sub.tests.length);

    setText("result-device", sub.device ? "Ran on " + sub.device : "");
    setText("result-runtime", sub.runtime_ms ? "in " + (sub.runtime_ms / 1000).toFixed(2) + " s" : "");
    setText("result-stdout", sub.stdout || "");
    byId("result-stdout-box").hidden = !sub.stdout;
    setText("result-stderr", sub.stderr || "");
    byId("result-stderr-box").hidden = !sub.stderr;
  }

  function follow(id) {
    if (source) source.close();
    source = new EventSource("/api/submissions/" + encodeURIComponent(id) + "/events");
    source.addEventListener("status", (event) => {
      const sub = JSON.parse(event.data);
      render(sub);
      if (SETTLED.has(sub.status)) {
        source.close();
        source = null;
        byId("submit-button").disabled = false;
      }
    });
    source.addEventListener("error", () => {
      // The server ends the stream after the final event; EventSource would reconnect, so fall back to one fetch.
      if (source) { source.close(); source = null; }
      fetch("/api/submissions/" + encodeURIComponent(id), { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((sub) => {
          if (!sub) return;
          render(sub);
          if (!SETTLED.has(sub.status)) window.setTimeout(() => follow(id), 2000);
          else byId("submit-button").disabled = false;
        })
        .catch(() => { byId("submit-button").disabled = false; });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = byId("submit-form");
    if (!form) return;
    const error = byId("submit-error");
    const button = byId("submit-button");

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      window.gpulab.showError(error, "");
      button.disabled = true;
      try {
        const response = await window.gpulab.postJson(
          "/api/exercises/" + encodeURIComponent(form.dataset.slug) + "/submissions",
          { code: form.elements.code.value },
        );
        if (response.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname)); return; }
        if (!response.ok) {
          window.gpulab.showError(error, await window.gpulab.errorText(response));
          button.disabled = false;
          return;
        }
        const created = await response.json();
        render({ status: created.status, verdict: null, score: null, max_score: 0, tests: [], message: "", stdout: "", stderr: "", device: "", runtime_ms: null });
        follow(created.id);
      } catch (_) {
        window.gpulab.showError(error, "Could not reach the server; try again.");
        button.disabled = false;
      }
    });

    // Show the result of the last submission (its code is already in the editor).
    if (form.dataset.lastSubmission) follow(form.dataset.lastSubmission);
  });
})();
