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

window.gpulab = { postJson, errorText, showError, localTimes };
document.addEventListener("DOMContentLoaded", () => localTimes(document));
