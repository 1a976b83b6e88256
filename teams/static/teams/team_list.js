// The team list, live: each team's status, phase, turns and cost against its budgets
// (team.progress) and its open PM requests (pm_request.*), over the PM socket, which
// only carries the teams this user may see.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("list-config").textContent);
  const open = new Map(); // request id -> team slug

  const row = (slug) => document.querySelector(`#team-list tr[data-team="${CSS.escape(slug)}"]`);
  const cell = (tr, field) => tr.querySelector(`[data-field="${field}"]`);

  function progress(t) {
    const tr = row(t.team);
    if (!tr) return; // a team made after the page loaded: it shows on reload
    const status = cell(tr, "status");
    status.textContent = t.status_label;
    status.className = `status status-${t.status}`;
    cell(tr, "phase").textContent = t.phase;
    const turns = cell(tr, "turns");
    turns.textContent = `${t.turn_count} / ${t.max_turns}`;
    turns.classList.toggle("budget-warn", t.turn_count >= t.max_turns * cfg.budget_warning_share);
    const cost = cell(tr, "cost");
    const spent = Number(t.spent_usd), limit = Number(t.max_cost_usd);
    cost.textContent = `$${spent.toFixed(4)} / $${limit.toFixed(2)}`;
    cost.classList.toggle("budget-warn", limit > 0 && spent >= limit * cfg.budget_warning_share);
    // Start (or Resume) where the team's state allows it.
    const allowed = cfg.actions[t.status] || [];
    cell(tr, "actions").querySelectorAll("button[name=action]").forEach((button) => {
      button.hidden = !allowed.includes(button.value);
    });
  }

  function showRequests() {
    const counts = new Map();
    open.forEach((slug) => counts.set(slug, (counts.get(slug) || 0) + 1));
    document.querySelectorAll("#team-list tr[data-team]").forEach((tr) => {
      cell(tr, "requests").textContent = counts.get(tr.dataset.team) || 0;
    });
    document.getElementById("open-requests").textContent = open.size;
    document.getElementById("open-requests-plural").textContent = open.size === 1 ? "" : "s";
  }

  window.loomLive(() => cfg.ws, {
    "team.progress": progress,
    "pm_request.open_list": (e) => {
      open.clear();
      e.requests.forEach((r) => open.set(r.id, r.team));
      showRequests();
    },
    "pm_request.opened": (e) => { open.set(e.request.id, e.request.team); showRequests(); },
    "pm_request.answered": (e) => { open.delete(e.request.id); showRequests(); },
  });
})();
