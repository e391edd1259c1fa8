// The grading form (instructor/grade.html): the running total of the checked rubric items, keyboard shortcuts
// (1-9 toggle an item, c the comment, s skip, Ctrl+Enter save and next) and the reusable comments.
(function () {
  "use strict";

  function total(form, out) {
    let sum = 0;
    for (const box of form.querySelectorAll("input[name=item]:checked")) sum += Number(box.dataset.points);
    const max = Number(out.dataset.max);
    out.value = String(Math.round(Math.min(max, Math.max(0, sum)) * 1000) / 1000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("grade-form");
    if (!form) return;
    const out = document.getElementById("rubric-total");
    const comment = document.getElementById("grade-comment");
    const items = Array.from(form.querySelectorAll("input[name=item]"));
    form.addEventListener("change", () => total(form, out));
    total(form, out);
    for (const button of form.querySelectorAll("button.reuse")) {
      button.addEventListener("click", () => {
        const text = button.dataset.comment || "";
        comment.value = comment.value.trim() ? comment.value.trimEnd() + "\n" + text : text;
        comment.focus();
      });
    }
    document.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        document.getElementById("save-next").click();
        return;
      }
      const typing = event.target instanceof HTMLTextAreaElement || event.target instanceof HTMLInputElement && event.target.type !== "checkbox";
      if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
      if (/^[1-9]$/.test(event.key)) {
        const box = items[Number(event.key) - 1];
        if (box) { box.checked = !box.checked; box.dispatchEvent(new Event("change", { bubbles: true })); box.focus(); }
        event.preventDefault();
      } else if (event.key === "c") {
        event.preventDefault();
        comment.focus();
      } else if (event.key === "s") {
        event.preventDefault();
        document.getElementById("skip").click();
      }
    });
  });
})();
