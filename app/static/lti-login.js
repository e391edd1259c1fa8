// A launch inside the LMS's frame (lti/login_check.html): go on to the platform only if this browser sent back the
// probe cookie gpulab just set; otherwise say so and offer the same launch in a window of its own, where the
// cookies are first-party.
document.addEventListener("DOMContentLoaded", async () => {
  const box = document.getElementById("lti-login");
  if (!box) return;
  const blocked = () => {
    document.getElementById("lti-login-checking").hidden = true;
    document.getElementById("lti-login-blocked").hidden = false;
    document.getElementById("lti-open-window").focus();
  };
  try {
    const response = await fetch(box.dataset.checkUrl, { credentials: "include", cache: "no-store" });
    const answer = response.ok ? await response.json() : { cookies: false };
    if (answer.cookies) window.location.replace(box.dataset.authUrl);
    else blocked();
  } catch (_) {
    blocked();
  }
});
