// Posts the deep linking response back to the platform at once (lti/return.html); the Continue button is
// there for browsers without script.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("lti-return-form");
  if (form) form.submit();
});
