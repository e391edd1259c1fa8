// Exercise page: submit a Jupyter notebook by dropping it on #notebook (or choosing it with #notebook-file). The
// file's text goes to POST /api/exercises/{slug}/notebook-submissions, which grades the code of its cells tagged
// "solution"; a refusal (not a notebook, no tagged cell, another exercise...) shows the server's reason and costs
// no attempt. An accepted one is followed live by exercise.js (window.gpulabExercise.followSubmission).
// Everything is inserted with textContent.
"use strict";

(function () {
  const MAX_BYTES = 4 * 1024 * 1024; // the server's limit (app.domain.notebooks.MAX_NOTEBOOK_BYTES); it says so too

  function byId(id) { return document.getElementById(id); }

  async function submitNotebook(file) {
    const form = byId("submit-form");
    const error = byId("notebook-error");
    const status = byId("notebook-status");
    window.gpulab.showError(error, "");
    if (!file) return;
    if (file.size > MAX_BYTES * 2) {
      window.gpulab.showError(error, file.name + " is " + (file.size / 1048576).toFixed(1) + " MiB; at most 4 MiB are accepted: clear its outputs and save it again.");
      return;
    }
    status.textContent = "Sending " + file.name + "…";
    const body = { notebook: await file.text() };
    if (form.dataset.assignment) body.assignment_id = Number(form.dataset.assignment);
    try {
      const response = await window.gpulab.postJson(
        "/api/exercises/" + encodeURIComponent(form.dataset.slug) + "/notebook-submissions", body,
      );
      if (response.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname)); return; }
      if (!response.ok) {
        status.textContent = "";
        window.gpulab.showError(error, file.name + " was not submitted: " + await window.gpulab.errorText(response));
        return;
      }
      const created = await response.json();
      status.textContent = "Submitted the solution cells of " + file.name + ".";
      if (window.gpulabExercise && window.gpulabExercise.followSubmission) {
        window.gpulabExercise.followSubmission(created.id);
      } else {
        window.location.assign("/exercises/" + encodeURIComponent(form.dataset.slug) + "/history");
      }
    } catch (_) {
      status.textContent = "";
      window.gpulab.showError(error, "Could not reach the server; try again.");
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const zone = byId("notebook");
    if (!zone || !byId("submit-form")) return;
    zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("dragging"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("dragging");
      const files = event.dataTransfer ? event.dataTransfer.files : null;
      submitNotebook(files && files.length ? files[0] : null);
    });
    const picker = byId("notebook-file");
    picker.addEventListener("change", () => {
      submitNotebook(picker.files.length ? picker.files[0] : null);
      picker.value = "";
    });
  });
})();
