// Course staff forms: the time zone of the datetime-local inputs. A fresh form (select[data-zone-auto]) comes with
// its dates in UTC; this picks the browser's own zone when the select offers it and rewrites those dates (their
// data-utc value) into it, so the wall-clock times shown are the ones sent. The server reads them in the chosen
// zone. Without this script the form stays in UTC, which is as correct. No innerHTML.
"use strict";

(function () {
  function browserZone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (_) { return ""; }
  }

  function inZone(utcValue, zone) {
    // "2026-12-08T17:00" read as UTC, written as the same instant on the wall clock of `zone`.
    const when = new Date(utcValue + ":00Z");
    if (Number.isNaN(when.getTime())) return null;
    const parts = {};
    const format = new Intl.DateTimeFormat("en-US", {
      timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    });
    for (const part of format.formatToParts(when)) parts[part.type] = part.value;
    const hour = parts.hour === "24" ? "00" : parts.hour;
    return parts.year + "-" + parts.month + "-" + parts.day + "T" + hour + ":" + parts.minute;
  }

  function adopt(select) {
    const zone = browserZone();
    if (!zone || zone === select.value) return;
    if (!Array.from(select.options).some((option) => option.value === zone)) return;
    const form = select.form;
    const values = [];
    for (const input of form.querySelectorAll("input[type=datetime-local][data-utc]")) {
      const local = inZone(input.dataset.utc, zone);
      if (local === null) return;  // leave the whole form in UTC rather than half of it
      values.push([input, local]);
    }
    for (const [input, local] of values) input.value = local;
    select.value = zone;
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-zone-auto]")) adopt(select);
  });
})();
