// Instructor and admin pages: live prompt preview, wrong-variant fieldsets, check and regrade progress.
// Learner text is only ever set with textContent; the preview HTML comes from the server's sanitiser (nh3).
"use strict";

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

function setUpPreview() {
  const source = document.querySelector("textarea[data-preview]");
  if (!source) return;
  const target = document.getElementById(source.dataset.preview);
  const render = debounce(async () => {
    try {
      const response = await window.gpulab.postJson("/api/instructor/preview", { markdown: source.value });
      if (!response.ok) { target.textContent = await window.gpulab.errorText(response); return; }
      const data = await response.json();
      target.innerHTML = data.html;  // sanitised by app.domain.markdown, the same HTML learners get
    } catch (_) {
      target.textContent = "Preview unavailable: could not reach the server.";
    }
  }, 300);
  source.addEventListener("input", render);
  render();
}

function setUpWrongVariants() {
  const list = document.getElementById("wrong-list");
  const template = document.getElementById("wrong-template");
  const add = document.getElementById("add-wrong");
  if (!list || !template || !add) return;
  let counter = 1000;
  add.addEventListener("click", () => {
    const fragment = template.content.cloneNode(true);
    counter += 1;
    for (const el of fragment.querySelectorAll("[id]")) el.id = el.id.replace("-new", "-" + counter);
    for (const el of fragment.querySelectorAll("label[for]")) el.htmlFor = el.htmlFor.replace("-new", "-" + counter);
    list.appendChild(fragment);
    list.lastElementChild.querySelector("input").focus();
  });
  list.addEventListener("click", (event) => {
    const button = event.target.closest(".remove-wrong");
    if (button) button.closest("fieldset").remove();
  });
}

function poll(url, onData, intervalMs) {
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    try {
      const response = await fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" });
      if (response.ok && onData(await response.json())) { stopped = true; return; }
    } catch (_) { /* try again at the next tick */ }
    setTimeout(tick, intervalMs);
  };
  tick();
}

function setUpCheck() {
  const box = document.getElementById("check");
  if (!box || !["queued", "running"].includes(box.dataset.status)) return;
  const status = document.getElementById("check-status");
  poll(box.dataset.url, (data) => {
    status.textContent = data.status;
    status.className = "badge check-" + data.status;
    document.getElementById("check-count").textContent = data.done + " of " + data.total + " files graded";
    const bar = document.getElementById("check-progress");
    bar.max = Math.max(1, data.total);
    bar.value = data.done;
    document.getElementById("check-lines").textContent = data.lines.join("\n");
    const problems = document.getElementById("check-problems");
    problems.replaceChildren(...data.problems.map((p) => { const li = document.createElement("li"); li.textContent = p; return li; }));
    if (["passed", "failed", "error"].includes(data.status)) {
      window.location.reload();  // the publish button depends on the result
      return true;
    }
    return false;
  }, 1000);
}

function setUpRegrade() {
  const box = document.getElementById("regrade");
  if (!box) return;
  poll(box.dataset.url, (data) => {
    document.getElementById("regrade-count").textContent = data.done + " of " + data.total;
    document.getElementById("regrade-passed").textContent = data.passed + " passed";
    const bar = document.getElementById("regrade-progress");
    bar.max = Math.max(1, data.total);
    bar.value = data.done;
    document.getElementById("regrade-done").hidden = !data.finished;
    return data.finished;
  }, 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  setUpPreview();
  setUpWrongVariants();
  setUpCheck();
  setUpRegrade();
});
