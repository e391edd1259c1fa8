// Shared page behaviour: JSON calls for the page scripts, error text, local times, numbers for people, fresh pages
// after Back/Forward. No external code, no innerHTML.
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
  // Through timedText: a refusal's "closed on ... UTC" reads in the viewer's zone, like the gate's sentence above it.
  timedText(element, text || "");
  element.hidden = !text;
}

// Numbers for people, as the server's `num`/`points`/`duration_ms` filters (worker/core/humane.py) write them:
// at most `decimals` places, no trailing zeros, no exponent ("0.67", "4.67/10", "13,140").
function num(value, decimals) {
  if (value === null || value === undefined || !Number.isFinite(Number(value))) return "\u2013";
  const places = decimals === undefined ? 2 : decimals;
  const text = Number(value).toLocaleString("en-US", { maximumFractionDigits: places, minimumFractionDigits: 0 });
  return text === "-0" ? "0" : text;
}

function points(score, maxScore) { return num(score) + "/" + num(maxScore); }

function duration(ms) {
  if (ms === null || ms === undefined) return "\u2013";
  if (ms < 1000) return num(ms, 0) + " ms";
  const seconds = ms / 1000;
  if (seconds < 100) return num(seconds, 1) + " s";
  if (seconds < 5400) return num(seconds / 60, 1) + " min";
  return num(seconds / 3600, 1) + " h";
}

// Sizes as humane.size writes them (1 KB = 1024 bytes, rounded up), and its one sentence for code over the limit.
function size(bytes) {
  if (bytes >= 1024 * 1024) return num(Math.ceil(bytes * 10 / (1024 * 1024)) / 10, 1) + " MB";
  return Math.ceil(bytes / 1024) + " KB";
}

function codeTooLarge(bytes, limit) {
  return "Your code is " + size(bytes) + "; the limit is " + size(limit) +
    ". Shorten it (remove long comments, pasted output or data) and submit again.";
}

const SHORT_TIME = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
// data-format="long" (deadlines): the weekday, the year and the zone's name too, so nobody misreads a due date.
const LONG_TIME = { weekday: "short", year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short" };

function localTimes(root) {
  // The server writes each time with its offset (the `when` filter); show the reader's own clock where the browser
  // can (the UTC text stays as the title). data-format="ago" keeps its "5 s ago" text and gets the time as title.
  for (const element of (root || document).querySelectorAll("time[datetime]:not([data-local])")) {
    const when = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) {
      const local = when.toLocaleString(undefined, element.dataset.format === "short" ? SHORT_TIME : LONG_TIME);
      if (element.dataset.format === "ago") {
        element.title = local;
      } else {
        element.title = element.textContent;
        element.textContent = local;
      }
      element.dataset.local = "1";
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

// Under an attempt limit, a counted submission is confirmed first with the browser's own dialog (keyboard and
// screen readers handle it): "Submit? You have 2 of 3 attempts left; this one counts." No limit, no question.
// Practice that an assignment counts (#practice-bound with its attempts) asks the same.
function confirmAttempt() {
  const gate = document.getElementById("gate") || document.getElementById("practice-bound");
  if (!gate || !gate.dataset.attemptsLeft || gate.classList.contains("gate-refused")) return true;
  const left = Number(gate.dataset.attemptsLeft);
  const max = Number(gate.dataset.attemptsMax);
  return window.confirm("Submit? You have " + left + " of " + max + " attempt" + (max === 1 ? "" : "s") + " left; this one counts.");
}

function waitText(seconds) {
  if (seconds < 60) return seconds + " s";
  const minutes = Math.floor(seconds / 60);
  const rest = seconds % 60;
  return minutes + " min" + (rest ? " " + rest + " s" : "");
}

// While the assignment's rate holds submissions back, its Submit button (#submit-button or #quiz-submit) stays
// disabled under a countdown (#gate-wait, a timer: read on demand, not announced every second); at zero it comes
// back and the gate's sentence (a polite live region) is asked for again.
let waitTimer = null;
function holdSubmit(retryAt, assignmentId, slug) {
  const wait = document.getElementById("gate-wait");
  const button = document.getElementById("submit-button") || document.getElementById("quiz-submit");
  if (!wait || !button) return;
  window.clearInterval(waitTimer);
  const tick = () => {
    const left = Math.ceil((retryAt - Date.now()) / 1000);
    if (left <= 0) {
      window.clearInterval(waitTimer);
      waitTimer = null;
      wait.hidden = true;
      button.disabled = false;
      button.removeAttribute("aria-describedby");
      refreshGate(assignmentId, slug, false);
      return;
    }
    wait.textContent = "You can submit again in " + waitText(left) + ".";
    wait.hidden = false;
    button.disabled = true;
    button.setAttribute("aria-describedby", "gate-wait");
  };
  tick();
  if (!wait.hidden) waitTimer = window.setInterval(tick, 1000);
}

// A 429 answer: hold Submit for its Retry-After seconds.
function holdAfter(response, assignmentId, slug) {
  const seconds = Number(response.headers.get("Retry-After"));
  if (response.status === 429 && seconds > 0) holdSubmit(Date.now() + seconds * 1000, assignmentId, slug);
}

function waiting() { return waitTimer !== null; }

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
    const box = document.getElementById("gate");
    box.classList.toggle("gate-refused", !item.gate.allowed);
    if (item.gate.attempts_left !== null) {
      box.dataset.attemptsLeft = String(item.gate.attempts_left);
      box.dataset.attemptsMax = String(item.gate.attempts_left + item.gate.attempts_used);
    }
    if (!item.gate.allowed && item.gate.tokens_left === 0 && item.gate.next_at) {
      holdSubmit(new Date(item.gate.next_at).getTime(), assignmentId, slug);
    }
    const score = document.getElementById("gate-score");
    if (settled && score && item.score_pct !== null) {
      score.textContent = "Counted score: " + num(item.score_pct) + "%" + (item.late ? " (late)" : "");
    }
  } catch (_) { /* the sentence is a convenience; submitting says the same */ }
}

// A box that scrolls (a wide table's .scroll, a long <pre>) must be reachable by keyboard to scroll it: while it
// overflows it becomes a focusable region named by its label or its table's caption (links inside it would let
// the keyboard reach their own column only, not a "Counted score" beyond them).
function focusableScrollers(root) {
  for (const box of (root || document).querySelectorAll(".scroll, pre, .output")) {
    const overflows = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
    const own = box.dataset.scrollFocus === "1";
    if (overflows && !own && !box.hasAttribute("tabindex")) {
      box.tabIndex = 0;
      box.dataset.scrollFocus = "1";
      if (!box.hasAttribute("role")) box.setAttribute("role", "region");
      if (!box.hasAttribute("aria-label") && !box.hasAttribute("aria-labelledby")) {
        const caption = box.querySelector("caption");
        box.setAttribute("aria-label", caption ? caption.textContent.trim() : "Scrollable content");
      }
    } else if (!overflows && own) {
      box.removeAttribute("tabindex");
      delete box.dataset.scrollFocus;
    }
  }
}

function watchScrollers() {
  let queued = false;
  const again = () => {
    if (queued) return;
    queued = true;
    window.requestAnimationFrame(() => { queued = false; focusableScrollers(document); });
  };
  again();
  window.addEventListener("resize", again);
  // Typing in the code editor changes nothing that scrolls here: skip its mutations (a big paste stays fast).
  const outsideEditor = (record) => {
    const node = record.target.nodeType === 1 ? record.target : record.target.parentElement;
    return !node || !node.closest(".cm-editor");
  };
  new MutationObserver((records) => { if (records.some(outsideEditor)) again(); }).observe(document.body, {
    childList: true, subtree: true, characterData: true, attributes: true, attributeFilter: ["hidden", "open"],
  });
}

// A page the browser restores from its back/forward cache shows what it held when it was left ("3 attempts left",
// no result): load it again, so it shows what the server knows now (pages are sent with Cache-Control: no-store,
// which keeps them out of the HTTP cache; this covers browsers that still keep them in the bfcache).
window.addEventListener("pageshow", (event) => { if (event.persisted) window.location.reload(); });

window.gpulab = {
  postJson, errorText, showError, localTimes, timedText, refreshGate, confirmAttempt, holdSubmit, holdAfter, waiting,
  num, points, duration, size, codeTooLarge, clockText,
};
// A timed assessment's countdown: from the seconds the server gave the page, on the page's own monotonic clock, so
// a browser whose clock is wrong counts right. Five seconds before the end the pages save their drafts once more
// (the "gpulab:time-almost-up" event); at the end, submitting is closed here too (the server refuses it anyway).
function clockText(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const two = (n) => String(n).padStart(2, "0");
  return (h ? h + ":" + two(m) : String(m)) + ":" + two(sec);
}

function countdowns(root) {
  for (const box of root.querySelectorAll(".countdown[data-remaining-s]")) {
    const remaining = Number(box.dataset.remainingS);
    if (!(remaining > 0)) continue;
    const end = performance.now() + remaining * 1000;
    const left = box.querySelector(".countdown-left");
    let warned = false;
    const tick = () => {
      const ms = end - performance.now();
      if (ms <= 5000 && !warned) { warned = true; document.dispatchEvent(new Event("gpulab:time-almost-up")); }
      if (ms <= 0) {
        window.clearInterval(timer);
        box.classList.add("over");
        box.setAttribute("aria-live", "assertive");
        box.textContent = box.dataset.onExpiry === "submit"
          ? "Time is up: your saved work is being submitted for you."
          : "Time is up: your saved work is kept for your instructor.";
        for (const id of ["submit-button", "run-button", "quiz-submit"]) {
          const button = document.getElementById(id);
          if (button) button.disabled = true;
        }
        return;
      }
      if (left) left.textContent = clockText(ms);
    };
    const timer = window.setInterval(tick, 1000);
    tick();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  countdowns(document);
  localTimes(document);
  watchScrollers();
  const gate = document.getElementById("gate");
  const form = document.getElementById("submit-form") || document.getElementById("quiz-form");
  if (gate && gate.dataset.retryAt && form) holdSubmit(new Date(gate.dataset.retryAt).getTime(), form.dataset.assignment, form.dataset.slug);
});
