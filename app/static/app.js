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

function localTimes(root) {
  // The server writes UTC; show the reader's own clock where the browser can.
  for (const element of (root || document).querySelectorAll("time[datetime]")) {
    const when = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) {
      element.title = element.textContent;
      element.textContent = when.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    }
  }
}

window.gpulab = { postJson, errorText, showError, localTimes };
document.addEventListener("DOMContentLoaded", () => localTimes(document));
