// Exercise page: the CodeMirror editor (when its bundle loaded), submit / run examples / reset, and the live
// result. A submission is followed over Server-Sent Events (queued -> running -> graded) with a progress
// indicator; example runs answer directly. Everything from the server or the learner is inserted with
// textContent, never innerHTML. Without this script the form still posts the textarea to the server.
// Under an assignment (the form's data-assignment holds its id) the submission carries that id, a refusal
// (403/429) shows the problem's detail, and the gate sentence above Submit is asked for again after each try.
"use strict";

(function () {
  const SETTLED = new Set(["graded", "error"]);
  const STEP_TEXT = { queued: "Waiting for a grader…", running: "Running your code against the tests…" };
  let source = null;
  let timer = null;
  let editor = null;
  let drafts = null;
  let busy = false;

  function byId(id) { return document.getElementById(id); }

  function setText(id, text) {
    const element = byId(id);
    element.textContent = text;
    return element;
  }

  function formatPoints(value) { return window.gpulab.num(value); }

  function announce(text) { setText("live-status", text); }

  // --- progress indicator -------------------------------------------------------------------------------

  function startProgress(step, text) {
    const started = Date.now();
    byId("progress").hidden = false;
    setProgressStep(step, text);
    setText("progress-elapsed", "0 s");
    window.clearInterval(timer);
    timer = window.setInterval(() => {
      setText("progress-elapsed", Math.round((Date.now() - started) / 1000) + " s");
    }, 1000);
  }

  function setProgressStep(step, text) {
    setText("progress-text", text || STEP_TEXT[step] || step);
    let reached = true;
    for (const item of byId("progress").querySelectorAll(".steps li")) {
      const current = item.dataset.step === step;
      item.classList.toggle("done", reached && !current);
      item.classList.toggle("current", current);
      if (current) { item.setAttribute("aria-current", "step"); reached = false; } else { item.removeAttribute("aria-current"); }
    }
  }

  function stopProgress() {
    window.clearInterval(timer);
    timer = null;
    byId("progress").hidden = true;
  }

  function setBusy(value) {
    busy = value;
    for (const id of ["submit-button", "run-button", "reset-button"]) {
      const button = byId(id);
      // Submit stays disabled while the assignment's rate holds it back (app.js's countdown gives it back).
      if (button) button.disabled = value || (id === "submit-button" && window.gpulab.waiting());
    }
  }

  // --- result -------------------------------------------------------------------------------------------

  function render(sub, title) {
    byId("result").hidden = false;
    setText("result-title", title);
    const status = setText("result-status", sub.status);
    status.className = "badge status-" + sub.status;
    status.hidden = Boolean(sub.verdict);
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
      const shown = test.visible !== false; // a test held back by its visibility tier: name and worth only
      row.className = "outcome-" + (shown ? test.outcome : "hidden");
      const points = (shown ? formatPoints(test.points) : "\u2013") + " / " + formatPoints(test.max_points);
      for (const text of [test.name, shown ? test.outcome : "held back", points]) {
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
        if (test.details) {
          // The framework's own words, for the curious: the message above is what to read.
          const more = document.createElement("details");
          const label = document.createElement("summary");
          label.textContent = "Details";
          const raw = document.createElement("pre");
          raw.textContent = test.details;
          more.append(label, raw);
          cell.appendChild(more);
        }
        feedback.appendChild(cell);
        body.appendChild(feedback);
      }
    }
    table.hidden = !(sub.tests && sub.tests.length);
    if (window.gpulabMeasurements) window.gpulabMeasurements.render(byId("result-measurements"), sub.measurements);

    setText("result-device", sub.device ? "Ran on " + sub.device : "");
    setText("result-runtime", sub.runtime_ms ? "in " + window.gpulab.duration(sub.runtime_ms) : "");
    setText("result-stdout", sub.stdout || "");
    byId("result-stdout-box").hidden = !sub.stdout;
    setText("result-stderr", sub.stderr || "");
    byId("result-stderr-box").hidden = !sub.stderr;
  }

  function settledText(sub, what) {
    const verdict = (sub.verdict || sub.status).replace("_", " ");
    const score = sub.score === null ? "" : ", " + formatPoints(sub.score) + " of " + formatPoints(sub.max_score) + " points";
    return what + ": " + verdict + score + ".";
  }

  // --- standing (best score, attempts) --------------------------------------------------------------------

  async function refreshStanding(slug) {
    try {
      const response = await fetch("/api/exercises/" + encodeURIComponent(slug) + "/progress", { credentials: "same-origin" });
      if (!response.ok) return;
      const p = await response.json();
      const labels = { not_started: "Not started", attempted: "Attempted", passed: "Passed" };
      const state = byId("standing-state");
      state.className = "state state-" + p.state;
      state.lastChild.textContent = labels[p.state] || p.state;
      setText("standing-best", p.best_score === null ? "" : "best: " + formatPoints(p.best_score) + "/" + formatPoints(p.best_max_score));
      const link = setText("standing-history", "History (" + p.attempts + ")");
      link.hidden = !p.attempts;
    } catch (_) { /* the standing is a convenience; the history page has it all */ }
  }

  function refreshGate(form, settled) {
    return window.gpulab.refreshGate(form.dataset.assignment, form.dataset.slug, settled);
  }

  // --- following a submission -----------------------------------------------------------------------------

  function follow(id, slug, live, seen) {
    if (source) source.close();
    const url = "/api/submissions/" + encodeURIComponent(id);
    let watched = live || Boolean(seen);  // saw it grading: once settled, the standing and counted score above are out of date
    const settle = (sub) => {
      stopProgress();
      setBusy(false);
      if (live) announce(settledText(sub, "Graded"));
      if (watched) {
        refreshStanding(slug);
        refreshGate(byId("submit-form"), true);
      }
    };
    const show = (sub) => {
      if (SETTLED.has(sub.status)) {
        render(sub, live ? "Result" : "Result of your last submission");
        settle(sub);
        return true;
      }
      // Until it settles there is no result to show: the progress box says where it is, not an empty result.
      byId("result").hidden = true;
      watched = true;
      if (live) { setProgressStep(sub.status); announce(STEP_TEXT[sub.status] || sub.status); }
      else if (byId("progress").hidden) startProgress(sub.status, "Your last submission is being graded…");
      else setProgressStep(sub.status, "Your last submission is being graded…");
      return false;
    };
    source = new EventSource(url + "/events");
    source.addEventListener("status", (event) => {
      if (show(JSON.parse(event.data))) { source.close(); source = null; }
    });
    source.addEventListener("error", () => {
      // The server ends the stream after the final event and EventSource would reconnect: ask once instead.
      if (source) { source.close(); source = null; }
      fetch(url, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((sub) => {
          if (!sub) { stopProgress(); setBusy(false); return; }
          if (!show(sub)) window.setTimeout(() => follow(id, slug, live, watched), 2000);
        })
        .catch(() => { stopProgress(); setBusy(false); });
    });
  }

  // --- actions --------------------------------------------------------------------------------------------

  function currentCode(form) {
    return editor ? editor.getValue() : form.elements.code.value;
  }

  // Code over the limit is refused here, before sending, in the server's words (exact size, the real limit).
  function oversize(form) {
    const limit = Number(form.dataset.maxBytes || 0);
    const bytes = new TextEncoder().encode(currentCode(form)).length;
    return limit && bytes > limit ? window.gpulab.codeTooLarge(bytes, limit) : "";
  }

  // An example run is made in the variant of the page it runs on: the assignment's, or practice.
  function runBody(form) {
    const body = { code: currentCode(form) };
    if (form.dataset.assignment) body.assignment_id = Number(form.dataset.assignment);
    return body;
  }

  async function submitCode(form) {
    const error = byId("submit-error");
    if (busy || window.gpulab.waiting()) return;
    const tooLarge = oversize(form);
    window.gpulab.showError(error, tooLarge);
    if (tooLarge) return;
    if (!window.gpulab.confirmAttempt()) return;  // under an attempt limit: "Submit? 2 of 3 attempts left"
    setBusy(true);
    const slug = form.dataset.slug;
    const body = { code: currentCode(form) };
    if (form.dataset.assignment) body.assignment_id = Number(form.dataset.assignment);
    try {
      const response = await window.gpulab.postJson(
        "/api/exercises/" + encodeURIComponent(slug) + "/submissions", body,
      );
      if (response.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname)); return; }
      if (!response.ok) {
        // Under an assignment a 403/429 says why (the gate's sentence); #submit-error is an alert.
        window.gpulab.showError(error, await window.gpulab.errorText(response));
        window.gpulab.holdAfter(response, form.dataset.assignment, slug);
        setBusy(false);
        refreshGate(form);
        return;
      }
      const created = await response.json();
      followNew(form, created.id);
    } catch (_) {
      window.gpulab.showError(error, "Could not reach the server; try again.");
      setBusy(false);
    }
  }

  function followNew(form, id) {
    refreshGate(form);  // a queued attempt already counts
    byId("result").hidden = true;
    setBusy(true);
    startProgress("queued");
    announce("Submitted. " + STEP_TEXT.queued);
    follow(id, form.dataset.slug, true);
  }

  async function runExamples(form) {
    const error = byId("submit-error");
    if (busy) return;
    const tooLarge = oversize(form);
    window.gpulab.showError(error, tooLarge);
    if (tooLarge) return;
    setBusy(true);
    byId("result").hidden = true;
    startProgress("running", "Running the example tests…");
    announce("Running the example tests…");
    try {
      const response = await window.gpulab.postJson(
        "/api/exercises/" + encodeURIComponent(form.dataset.slug) + "/runs", runBody(form),
      );
      if (!response.ok) {
        window.gpulab.showError(error, await window.gpulab.errorText(response));
        announce("The example tests could not run.");
        return;
      }
      const run = await response.json();
      render(run, "Example tests (not graded)");
      announce(settledText(run, "Example tests"));
    } catch (_) {
      window.gpulab.showError(error, "Could not reach the server; try again.");
    } finally {
      stopProgress();
      setBusy(false);
    }
  }

  function setCode(form, code) {
    if (editor) editor.setValue(code); else form.elements.code.value = code;
  }

  async function resetToStarter(form) {
    const starter = JSON.parse(byId("starter-code").textContent);
    if (!window.confirm("Replace your code with the starter code? Your current code and its saved draft are lost unless you submitted it.")) return;
    if (drafts) await drafts.discard(starter); else setCode(form, starter);
    if (editor) editor.focus(); else form.elements.code.focus();
    announce("The editor holds the starter code again.");
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = byId("submit-form");
    if (!form) return;
    const textarea = form.elements.code;

    if (window.gpulabEditor) {
      try {
        editor = window.gpulabEditor.mount(textarea, {
          labelId: "code-label", describedBy: "editor-help", onSubmit: () => submitCode(form),
          onChange: () => { if (drafts) drafts.changed(); },
        });
        byId("code-label").addEventListener("click", () => editor.focus());
      } catch (err) {
        editor = null; // the textarea stays usable
        textarea.hidden = false;
        console.error("gpulab: the code editor could not start", err);
      }
    }
    textarea.addEventListener("input", () => { if (drafts) drafts.changed(); });  // the plain-textarea fallback
    if (window.gpulabDrafts && form.dataset.user) {
      drafts = window.gpulabDrafts.start({
        slug: form.dataset.slug, assignment: form.dataset.assignment, userId: form.dataset.user, kind: "code",
        revision: form.dataset.draftRevision, status: byId("draft-status"),
        get: () => currentCode(form), set: (code) => setCode(form, code),
      });
    }
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); submitCode(form); }
    });

    form.addEventListener("submit", (event) => { event.preventDefault(); submitCode(form); });
    const run = byId("run-button");
    if (run) { run.hidden = false; run.addEventListener("click", () => runExamples(form)); }
    const reset = byId("reset-button");
    reset.hidden = false;
    reset.addEventListener("click", () => resetToStarter(form));

    // For tests, the browser console and notebook.js (a dropped notebook is followed like a submission).
    window.gpulabExercise = { editor: () => editor, drafts: () => drafts, followSubmission: (id) => followNew(form, id) };
    document.addEventListener("gpulab:time-almost-up", () => { if (drafts) drafts.saveNow(); });
    // Show the result of the last submission (its code is already in the editor).
    if (form.dataset.lastSubmission) follow(form.dataset.lastSubmission, form.dataset.slug, false);
  });
})();
