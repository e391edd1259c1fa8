// The grading form (instructor/grade.html): the running total of the checked rubric items, keyboard shortcuts
// (1-9 toggle an item, c the comment, s skip, Ctrl+Enter save and next), the reusable comments, and line
// comments on a code submission (a click on a line number).
(function () {
  "use strict";

  function total(form, out) {
    let sum = 0;
    for (const box of form.querySelectorAll("input[name=item]:checked")) sum += Number(box.dataset.points);
    const max = Number(out.dataset.max);
    const min = out.dataset.min === "" ? -Infinity : Number(out.dataset.min);
    out.value = window.gpulab.num(Math.min(max, Math.max(min, sum)));
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
    // A click on a line number of the code fills the blank line-comment row (adding another blank one after it).
    const notes = document.getElementById("line-comments");
    for (const pick of document.querySelectorAll("button.line-pick")) {
      pick.addEventListener("click", () => {
        const blank = notes.querySelector("[data-blank]");
        const fresh = blank.cloneNode(true);
        blank.removeAttribute("data-blank");
        blank.querySelector("input[name=line]").value = pick.dataset.line;
        for (const input of fresh.querySelectorAll("input")) input.value = "";
        notes.appendChild(fresh);
        blank.querySelector("input[name=line_text]").focus();
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
