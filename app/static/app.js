// Shared page behaviour: JSON calls for the page scripts, error text, local times. No external code, no innerHTML.
// Logging in and out are plain HTML forms (with the session's CSRF token), so they work without this file.
"use strict";

async function postJson(url, body) {
  // JSON content type is required by the server's CSRF rule for API calls that carry the session cookie.
  return fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Accept": "application/json" },
    credentials: "same-origin",
    body: JSON.stringify(body === undefined ? {} : body),
  });
}

async function errorText(response) {
  try {
    const data = await response.json();
    if (data && typeof data.detail === "string") return data.detail;
  } catch (_) { /* not JSON */ }
  return "Request failed (" + response.status + ")";
}

function showError(element, text) {
  element.textContent = text;
  element.hidden = !text;
}

const SHORT_TIME = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
// data-format="long" (deadlines): the weekday, the year and the zone's name too, so nobody misreads a due date.
const LONG_TIME = { weekday: "short", year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short" };

function localTimes(root) {
  // The server writes UTC; show the reader's own clock where the browser can (the UTC text stays as the title).
  for (const element of (root || document).querySelectorAll("time[datetime]")) {
    const when = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) {
      element.title = element.textContent;
      element.textContent = when.toLocaleString(undefined, element.dataset.format === "long" ? LONG_TIME : SHORT_TIME);
    }
  }
}

// A sentence of ours with "YYYY-MM-DD HH:MM UTC" times in it (a gate's "closed on ..."): written as text, each time a
// <time> element shown in the reader's zone, as the server's `timed` filter does.
const UTC_TIME = /(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) UTC/g;
function timedText(element, sentence) {
  element.textContent = "";
  let last = 0;
  for (const match of sentence.matchAll(UTC_TIME)) {
    element.append(sentence.slice(last, match.index));
    const time = document.createElement("time");
    time.setAttribute("datetime", match[1] + "T" + match[2] + ":00Z");
    time.dataset.format = "long";
    time.textContent = match[0];
    element.append(time);
    last = match.index + match[0].length;
  }
  element.append(sentence.slice(last));
  localTimes(element);
}

// Under an assignment, the gate above Submit (#gate, #gate-text, #gate-score): asked for again after each try, so
// "2 attempts left; next in 3 min" stays true. The counted score is news only once an attempt settled.
async function refreshGate(assignmentId, slug, settled) {
  const gate = document.getElementById("gate-text");
  if (!assignmentId || !gate) return;
  try {
    const response = await fetch("/api/assignments/" + encodeURIComponent(assignmentId), { credentials: "same-origin" });
    if (!response.ok) return;
    const assignment = await response.json();
    const item = (assignment.items || []).find((i) => i.exercise === slug);
    if (!item || !item.gate) return;
    timedText(gate, item.gate.reason);
    document.getElementById("gate").classList.toggle("gate-refused", !item.gate.allowed);
    const score = document.getElementById("gate-score");
    if (settled && score && item.score_pct !== null) {
      score.textContent = "Counted score: " + String(Math.round(item.score_pct * 100) / 100) + "%" + (item.late ? " (late)" : "");
    }
  } catch (_) { /* the sentence is a convenience; submitting says the same */ }
}

window.gpulab = { postJson, errorText, showError, localTimes, timedText, refreshGate };
document.addEventListener("DOMContentLoaded", () => localTimes(document));
