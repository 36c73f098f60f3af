// The agora dashboard's behaviour: live refresh of the parts marked data-live, the overview's
// charts, and the buttons that call the admin API (with the session cookie and the
// X-Agora-Dashboard header the admin API requires beside it).
"use strict";
(function () {
  let charts = [];

  function drawCharts() {
    const data = document.getElementById("series");
    charts.forEach((c) => c.destroy());
    charts = [];
    if (!data || !window.agoraCharts) return;
    const series = JSON.parse(data.textContent);
    charts = window.agoraCharts.render(series, { requests: "chart-requests", cost: "chart-cost", share: "chart-share" });
  }

  function say(text, isError) {
    const out = document.getElementById("action-result");
    if (out) {
      out.textContent = text;
      out.className = isError ? "error" : "muted";
    }
  }

  // Replaces every data-live element with its new version, keeping opened <details> open.
  function swap(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    let seriesChanged = false;
    template.content.querySelectorAll("[data-live][id]").forEach((fresh) => {
      const current = document.getElementById(fresh.id);
      if (!current) return;
      if (current.outerHTML === fresh.outerHTML) return;
      current.querySelectorAll("details[open][data-key]").forEach((d) => {
        const again = fresh.querySelector('details[data-key="' + CSS.escape(d.dataset.key) + '"]');
        if (again) again.open = true;
      });
      if (fresh.id === "series") seriesChanged = true;
      current.replaceWith(fresh);
    });
    if (seriesChanged) drawCharts();
  }

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    const status = document.getElementById("live-status");
    try {
      const response = await fetch(window.location.href, {
        headers: { "X-Agora-Partial": "1" },
        credentials: "same-origin",
        cache: "no-store",
      });
      if (response.status === 401) {
        window.location.reload();
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      swap(await response.text());
      if (status) status.textContent = "live: updated " + new Date().toLocaleTimeString();
    } catch (error) {
      if (status) status.textContent = "live: update failed (" + error.message + "), retrying";
    } finally {
      busy = false;
    }
  }

  async function admin(path, body) {
    const response = await fetch(path, {
      method: "POST",
      headers: { "X-Agora-Dashboard": "1", "Content-Type": "application/json" },
      credentials: "same-origin",
      body: body === undefined ? "{}" : JSON.stringify(body),
    });
    const text = await response.text();
    let value = text;
    try { value = JSON.parse(text); } catch (_) { /* not JSON: shown as text */ }
    return { ok: response.ok, status: response.status, value: value };
  }

  // A review decision: the reviewer's name (remembered in this browser) and, for a rejection
  // or an edit, its reason or source. A passing edit is a new routine: its page (the button's
  // data-next, then the new id) is opened.
  async function review(button) {
    const field = (id) => (document.getElementById(id) || { value: "" }).value;
    const reviewer = field("review-reviewer").trim();
    if (!reviewer) {
      say("say who reviews: fill in Reviewer", true);
      return;
    }
    window.localStorage.setItem("agora-reviewer", reviewer);
    const body = { reviewer: reviewer };
    if (button.dataset.needs === "reason") body.reason = field("review-reason");
    if (button.dataset.needs === "source") body.source = field("review-source");
    const result = await admin(button.dataset.review, body);
    if (!result.ok) {
      say(result.value.message || result.value, true);
      return;
    }
    if (button.dataset.needs === "source") {
      window.location.assign((button.dataset.next || "/dashboard/routines/") + result.value.id);
      return;
    }
    say("done: " + button.textContent.trim().toLowerCase(), false);
    window.location.reload();
  }

  const reviewer = document.getElementById("review-reviewer");
  if (reviewer) reviewer.value = window.localStorage.getItem("agora-reviewer") || "";

  document.addEventListener("click", async (event) => {
    const reviewButton = event.target.closest("button[data-review]");
    if (reviewButton) {
      event.preventDefault();
      reviewButton.disabled = true;
      try {
        await review(reviewButton);
      } catch (error) {
        say("the request failed: " + error.message, true);
      } finally {
        reviewButton.disabled = false;
      }
      return;
    }
    const button = event.target.closest("button[data-action], button[data-test]");
    if (!button) return;
    event.preventDefault();
    button.disabled = true;
    try {
      if (button.dataset.action) {
        const result = await admin(button.dataset.action);
        const message = result.ok ? "done: " + button.textContent.trim().toLowerCase() : (result.value.message || result.value);
        say(message, !result.ok);
        await refresh();
      } else {
        const raw = document.getElementById("test-body").value;
        let body = raw;
        try { body = JSON.parse(raw); } catch (_) { /* sent as text */ }
        const result = await admin(button.dataset.test, { body: body });
        document.getElementById("test-result").textContent =
          (result.ok ? "" : "HTTP " + result.status + "\n") + JSON.stringify(result.value, null, 2);
      }
    } catch (error) {
      say("the request failed: " + error.message, true);
    } finally {
      button.disabled = false;
    }
  });

  drawCharts();
  const every = Number(document.body.dataset.pollMs || 0);
  if (every > 0) window.setInterval(refresh, every);
})();
