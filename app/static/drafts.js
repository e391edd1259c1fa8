// Drafts: the learner's work is saved on the server a moment after they stop typing and whenever the page is hidden
// (a closed tab, another app, a laptop lid), and restored on any device (PUT/GET /api/exercises/{slug}/draft).
// Every change is first kept in this browser (localStorage), so a crash, a killed browser or a lost connection loses
// nothing: the copy is sent once the server answers again, and the page says so. Each save names the revision it
// started from; when another tab or device saved since, the server refuses (409) and the learner chooses which to
// keep. A draft is never an attempt. Used by exercise.js (code) and quiz.js (answers).
"use strict";

window.gpulabDrafts = (function () {
  const PAUSE_MS = 1200;  // a moment after typing stops
  const RETRY_MS = 10000;  // while the server is unreachable

  function start(options) {
    const { slug, assignment, userId, kind, status, get, set } = options;
    let revision = Number(options.revision || 0);
    const key = "gpulab-draft:" + userId + ":" + slug + ":" + (assignment || "practice");
    const url = "/api/exercises/" + encodeURIComponent(slug) + "/draft";
    let saved = JSON.stringify(get());  // what the server holds (the page was drawn from it)
    let timer = null;
    let inFlight = false;
    let again = false;
    let conflict = false;
    let applying = false;  // the page itself changing the content (a loaded draft): not the learner's edit

    function apply(content) {
      applying = true;
      try { set(content); } finally { applying = false; }
    }

    function say(text, state) {
      if (!status) return;
      status.textContent = text;
      status.dataset.state = state;
      status.hidden = !text;
    }

    function savedText(iso) {
      const at = iso ? new Date(iso) : new Date();
      return "Draft saved at " + at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) + ".";
    }

    function keepLocal(content) {
      try {
        localStorage.setItem(key, JSON.stringify({ base: revision, content: content, at: Date.now() }));
      } catch (_) { /* storage full or off: the server save still runs */ }
    }

    function dropLocal() {
      try { localStorage.removeItem(key); } catch (_) { /* nothing to drop */ }
    }

    function body(content, base) {
      const out = { base_revision: base };
      out[kind === "quiz" ? "answers" : "code"] = content;
      if (assignment) out.assignment_id = Number(assignment);
      return out;
    }

    async function save(keepalive) {
      if (conflict) return;
      const content = get();
      const text = JSON.stringify(content);
      if (text === saved) { dropLocal(); return; }
      if (inFlight) { again = true; return; }
      inFlight = true;
      try {
        const response = await fetch(url, {
          method: "PUT",
          headers: { "Content-Type": "application/json", "Accept": "application/json" },
          credentials: "same-origin",
          keepalive: Boolean(keepalive) && text.length < 60000,  // a hidden page's last save outlives it
          body: JSON.stringify(body(content, revision)),
        });
        if (response.status === 409) {
          conflict = true;
          offerChoice();
        } else if (response.ok) {
          const stored = await response.json();
          revision = stored.revision;
          saved = text;
          if (JSON.stringify(get()) === text) dropLocal(); else keepLocal(get());
          say(savedText(stored.updated_at), "saved");
        } else {
          // Refused (too large, a closed exam): the words of the server; the local copy stays.
          say("Not saved: " + (await window.gpulab.errorText(response)), "error");
        }
      } catch (_) {
        say("Offline: your changes are kept in this browser and will be saved when the connection returns.", "offline");
        window.setTimeout(() => save(false), RETRY_MS);
      } finally {
        inFlight = false;
        if (again) { again = false; save(false); }
      }
    }

    function offerChoice() {
      say("", "");
      const box = document.createElement("span");
      box.className = "draft-conflict";
      box.append("Another tab or device saved newer work for this page. ");
      const load = document.createElement("button");
      load.type = "button";
      load.className = "secondary subtle";
      load.textContent = "Load it";
      const keep = document.createElement("button");
      keep.type = "button";
      keep.className = "secondary subtle";
      keep.textContent = "Keep mine";
      box.append(load, " ", keep);
      status.replaceChildren(box);
      status.dataset.state = "conflict";
      status.hidden = false;
      load.addEventListener("click", async () => {
        const newer = await (await fetch(url + query(), { credentials: "same-origin" })).json();
        revision = newer.revision;
        const content = kind === "quiz" ? (newer.answers || {}) : (newer.code || "");
        apply(content);
        saved = JSON.stringify(content);
        dropLocal();
        conflict = false;
        say(savedText(newer.updated_at).replace("Draft saved", "Loaded the draft saved"), "saved");
      });
      keep.addEventListener("click", async () => {
        const newer = await (await fetch(url + query(), { credentials: "same-origin" })).json();
        revision = newer.revision;  // save mine over it, knowingly
        saved = JSON.stringify(kind === "quiz" ? newer.answers : newer.code);
        conflict = false;
        save(false);
      });
    }

    function query() {
      return assignment ? "?assignment_id=" + encodeURIComponent(assignment) : "";
    }

    function changed() {
      if (conflict || applying) return;
      keepLocal(get());
      say("Unsaved changes…", "dirty");
      window.clearTimeout(timer);
      timer = window.setTimeout(() => save(false), PAUSE_MS);
    }

    // A copy this browser kept but the server never got (a crash, a closed laptop, no connection): put it back.
    try {
      const local = JSON.parse(localStorage.getItem(key) || "null");
      if (local && JSON.stringify(local.content) !== saved) {
        if (local.base === revision) {
          apply(local.content);
          say("Restored your unsaved changes from this browser; saving them now.", "restored");
          save(false);
        } else {
          dropLocal();  // the server has newer work from elsewhere: it wins, and the page shows it
          say("A newer draft from another tab or device is shown.", "saved");
        }
      }
    } catch (_) { /* no storage: the server's draft is what there is */ }

    document.addEventListener("visibilitychange", () => { if (document.visibilityState === "hidden") save(true); });
    window.addEventListener("pagehide", () => save(true));
    window.addEventListener("online", () => save(false));

    return {
      changed,
      saveNow: () => save(false),
      // Back to the starter: the draft is removed, so no device restores the old work.
      async discard(starter) {
        window.clearTimeout(timer);
        dropLocal();
        apply(starter);
        await fetch(url + query(), {
          method: "DELETE", headers: { "Content-Type": "application/json" }, credentials: "same-origin",
        });
        revision = 0;
        saved = JSON.stringify(get());
        say("", "");
      },
      revision: () => revision,
    };
  }

  return { start };
})();
