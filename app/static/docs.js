// The API page (/docs): Swagger UI over /openapi.json, started from this file so the page keeps the site's
// Content-Security-Policy (no inline script). Deep links are off: Swagger UI draws them as links inside each
// operation's button, an interactive element nested in another that keyboards and screen readers trip over.
// Swagger UI leaves a request body's text area (under "Try it out") without a label: it gets one here.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    layout: "BaseLayout",
    deepLinking: false,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [window.SwaggerUIBundle.presets.apis],
  });
  new MutationObserver(() => {
    for (const box of root.querySelectorAll("textarea.body-param__text:not([aria-label])")) {
      box.setAttribute("aria-label", "Request body (JSON)");
    }
  }).observe(root, { childList: true, subtree: true });
});
