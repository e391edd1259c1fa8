// Shared page behaviour: the login form and the log-out button. No external code, no innerHTML.
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

function setUpLogin() {
  const form = document.getElementById("login-form");
  if (!form) return;
  const error = document.getElementById("login-error");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError(error, "");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const response = await postJson("/api/auth/login", {
        email: form.elements.email.value,
        password: form.elements.password.value,
      });
      if (response.ok) {
        const next = form.dataset.next || "/exercises";
        window.location.assign(next.startsWith("/") && !next.startsWith("//") ? next : "/exercises");
        return;
      }
      showError(error, await errorText(response));
    } catch (_) {
      showError(error, "Could not reach the server; try again.");
    } finally {
      button.disabled = false;
    }
  });
}

function setUpLogout() {
  const button = document.getElementById("logout");
  if (!button) return;
  button.addEventListener("click", async () => {
    await postJson("/api/auth/logout").catch(() => null);
    window.location.assign("/login");
  });
}

window.gpulab = { postJson, errorText, showError };
document.addEventListener("DOMContentLoaded", () => {
  setUpLogin();
  setUpLogout();
});
