// Quiz page: send the answers as JSON, then show each question's feedback and explanation under it.
// Everything from the server is inserted with textContent, never innerHTML. Retrying is unlimited.
"use strict";

(function () {
  function byId(id) { return document.getElementById(id); }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function fmt(value) { return window.gpulab.num(value); }

  function collect(form) {
    const answers = {};
    for (const fieldset of form.querySelectorAll("fieldset[data-question]")) {
      const id = fieldset.dataset.question;
      if (fieldset.dataset.type === "text") {
        const text = fieldset.querySelector("textarea").value;
        if (text.trim()) answers[id] = text;
      } else {
        const picked = Array.from(fieldset.querySelectorAll("input:checked"), (input) => input.value);
        if (picked.length) answers[id] = picked;
      }
    }
    return answers;
  }

  function section(box, title, body) {
    box.appendChild(el("h3", "", title));
    if (Array.isArray(body)) {
      const list = el("ul");
      for (const item of body) list.appendChild(el("li", "", item));
      box.appendChild(list);
    } else {
      box.appendChild(el("p", "", body));
    }
  }

  function showQuestion(result) {
    const box = byId("feedback-" + result.id);
    if (!box) return;
    box.replaceChildren();
    let state = "wrong";
    if (result.pending) state = "pending";
    else if (!result.answered) state = "unanswered";
    else if (result.correct) state = "correct";
    else if (result.score > 0) state = "partial";
    box.className = "q-feedback " + state;
    box.appendChild(el("p", "verdict", fmt(result.score) + " / " + fmt(result.max_score) + " · " + result.feedback));
    if (result.explanation) section(box, "Explanation", result.explanation);
    if (result.model_answer) section(box, "Model answer", result.model_answer);
    if (result.rubric && result.rubric.length) section(box, "Check your answer against this list yourself", result.rubric);
    if (result.hint && !result.correct) section(box, "Hint", result.hint);
    if (result.common_mistakes && result.common_mistakes.length) section(box, "Common mistakes", result.common_mistakes);
    box.hidden = false;
  }

  // Put saved answers back into the form (a draft from the server or this browser).
  function fill(form, answers) {
    for (const fieldset of form.querySelectorAll("fieldset[data-question]")) {
      const value = (answers || {})[fieldset.dataset.question];
      if (fieldset.dataset.type === "text") {
        fieldset.querySelector("textarea").value = typeof value === "string" ? value : "";
      } else {
        for (const input of fieldset.querySelectorAll("input")) input.checked = Array.isArray(value) && value.includes(input.value);
      }
    }
  }

  function clearFeedback(form) {
    for (const box of form.querySelectorAll(".q-feedback")) { box.replaceChildren(); box.hidden = true; }
    byId("quiz-score").hidden = true;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = byId("quiz-form");
    if (!form) return;
    const error = byId("quiz-error");
    const button = byId("quiz-submit");
    const reset = byId("quiz-reset");
    const saved = byId("draft-answers");
    if (saved) fill(form, JSON.parse(saved.textContent));
    const drafts = window.gpulabDrafts && form.dataset.user ? window.gpulabDrafts.start({
      slug: form.dataset.slug, assignment: form.dataset.assignment, userId: form.dataset.user, kind: "quiz",
      revision: form.dataset.draftRevision, status: byId("draft-status"),
      get: () => collect(form), set: (answers) => fill(form, answers),
    }) : null;
    if (drafts) {
      form.addEventListener("input", () => drafts.changed());
      form.addEventListener("change", () => drafts.changed());
      document.addEventListener("gpulab:time-almost-up", () => drafts.saveNow());
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      window.gpulab.showError(error, "");
      const answers = collect(form);
      if (!Object.keys(answers).length) { window.gpulab.showError(error, "Answer at least one question first."); return; }
      if (window.gpulab.waiting()) return;
      if (!window.gpulab.confirmAttempt()) return;  // under an attempt limit: "Submit? 2 of 3 attempts left"
      button.disabled = true;
      try {
        const response = await window.gpulab.postJson(
          "/api/exercises/" + encodeURIComponent(form.dataset.slug) + "/quiz",
          // Under an assignment its gate applies (dates, attempts, rate) and the attempt counts there.
          form.dataset.assignment ? { answers: answers, assignment_id: Number(form.dataset.assignment) } : { answers: answers },
        );
        if (response.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname)); return; }
        if (!response.ok) {
          window.gpulab.showError(error, await window.gpulab.errorText(response));  // under an assignment: the gate's sentence
          window.gpulab.holdAfter(response, form.dataset.assignment, form.dataset.slug);
          window.gpulab.refreshGate(form.dataset.assignment, form.dataset.slug, false);
          return;
        }
        const attempt = await response.json();
        clearFeedback(form);
        for (const result of attempt.questions) showQuestion(result);
        const score = byId("quiz-score");
        score.textContent = "Score " + fmt(attempt.score) + " / " + fmt(attempt.max_score) + " · " +
          (attempt.passed ? "passed" : "not passed yet") + " · best " + fmt(attempt.best_score || 0) +
          " after " + attempt.attempts + " attempt" + (attempt.attempts === 1 ? "" : "s") + ".";
        if (attempt.answers_withheld) score.textContent += " The explanations show after your last attempt, or once the assignment closes.";
        score.className = "quiz-score verdict-" + (attempt.passed ? "passed" : "failed");
        score.hidden = false;
        reset.hidden = false;
        score.scrollIntoView({ block: "nearest" });
        window.gpulab.refreshGate(form.dataset.assignment, form.dataset.slug, true);
      } catch (_) {
        window.gpulab.showError(error, "Could not reach the server; try again.");
      } finally {
        button.disabled = window.gpulab.waiting();
      }
    });

    reset.addEventListener("click", () => {
      form.reset();
      if (drafts) drafts.discard({});
      clearFeedback(form);
      reset.hidden = true;
      const first = form.querySelector("fieldset input, fieldset textarea");
      if (first) first.focus();
    });
  });
})();
