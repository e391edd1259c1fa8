// History page: bring the chosen attempt into view and focus when the address asks for it.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const attempt = document.getElementById("attempt");
  if (attempt && window.location.hash === "#attempt") attempt.focus({ preventScroll: false });
});
