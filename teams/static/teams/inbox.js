// Live PM inbox: requests appear when a coach asks and leave when anyone answers.
// Questions are untrusted text: they go into the page with textContent only.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("inbox-config").textContent);
  const inbox = document.getElementById("inbox");
  const empty = document.getElementById("inbox-empty");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // An approval request's card, as the page renders it (templates/teams/_approval_card.html):
  // who calls what, why, each argument in a monospace block, a note, edited arguments,
  // and Approve / Always approve / Deny.
  function approvalCard(r) {
    const call = el("p", "approval-call");
    call.append(el("strong", "approval-agent", r.agent || "An agent"),
                document.createTextNode(" wants to call "), el("code", "approval-tool", r.tool));
    const args = el("dl", "approval-args");
    (r.arguments_shown || []).forEach(([name, value]) => {
      const dd = el("dd");
      dd.append(el("pre", "", value));
      args.append(el("dt", "", name), dd);
    });
    if (!args.children.length) args.append(el("dt", "", "(none)"));
    const noteId = `pm-note-${r.id}`;
    const label = el("label", "note", "Note for ");
    label.htmlFor = noteId;
    label.append(el("span", "note-agent", r.agent || "the agent"), document.createTextNode(" "),
                 el("span", "hint", "(optional: it reads this with your answer, e.g. why you deny it)"));
    const note = el("textarea");
    note.id = noteId; note.name = "note"; note.rows = 2; note.maxLength = 20000;
    note.placeholder = "Why you approve or deny it, or what to do instead";
    const edit = el("details");
    const edited = el("textarea");
    edited.name = "arguments"; edited.rows = 6; edited.spellcheck = false;
    edited.value = r.arguments ? JSON.stringify(r.arguments, null, 2) : "";
    edit.append(el("summary", "", "Approve with edited arguments"), edited);
    const choices = el("p", "approval-choices");
    (r.choices || []).forEach((choice) => {
      const button = el("button", `choice-${choice.toLowerCase().replace(/ /g, "-")}`, choice);
      button.name = "answer"; button.value = choice; button.formNoValidate = true;
      choices.append(button, document.createTextNode(" "));
    });
    return [call, el("h3", "", "Why"),
            el("blockquote", "approval-why", r.why || "(the agent gave no reason with this call)"),
            el("h3", "", "Arguments"), args, label, note, edit, choices];
  }

  function refreshEmpty() { empty.hidden = inbox.children.length > 0; }

  function add(r) {
    if (inbox.querySelector(`li[data-id="${r.id}"]`)) return;
    const li = el("li", `pm-item kind-${r.kind || "question"}`);
    li.dataset.id = r.id;
    const meta = el("div", "meta");
    const link = el("a", "", r.team_name || r.team);
    link.href = cfg.team_url.replace("SLUG", encodeURIComponent(r.team));
    meta.append(link, document.createTextNode(` · ${r.agent || "an agent"} · just now`));
    const form = el("form");
    form.method = "post";
    form.action = cfg.answer_url.replace("/0/", `/${r.id}/`);
    const csrf = el("input");
    csrf.type = "hidden"; csrf.name = "csrfmiddlewaretoken"; csrf.value = cfg.csrf;
    if (r.kind === "approval") {
      form.className = "approval";
      form.append(csrf, ...approvalCard(r));
      li.append(meta, el("h2", "approval-title", "An agent asks to call a tool"), form);
      inbox.prepend(li);
      refreshEmpty();
      return;
    }
    if (r.kind === "stuck") {  // Close the phase / Let them go on / Pause
      form.className = "budget-choices";
      form.append(csrf);
      (r.choices || []).forEach((choice) => {
        const button = el("button", "", choice);
        button.name = "answer"; button.value = choice;
        form.append(button, document.createTextNode(" "));
      });
      li.append(meta, el("p", "question", r.question), form);
      inbox.prepend(li);
      refreshEmpty();
      return;
    }
    if (r.kind === "budget") {  // quick choices, or a new budget
      const choices = el("form", "budget-choices");
      choices.method = "post"; choices.action = form.action;
      choices.append(csrf.cloneNode());
      (r.choices || []).forEach((choice) => {
        const button = el("button", "", choice);
        button.name = "answer"; button.value = choice;
        choices.append(button, document.createTextNode(" "));
      });
      const figure = el("input");
      figure.name = "answer"; figure.required = true;
      figure.placeholder = "a new budget, e.g. 7.50 (dollars) or 300 (turns)";
      form.className = "budget-figure";
      form.append(csrf, figure, el("button", "", "Set the budget and resume"));
      li.append(meta, el("p", "question", r.question), choices, form);
      inbox.prepend(li);
      refreshEmpty();
      return;
    }
    const answer = el("textarea");
    answer.name = "answer"; answer.rows = 2; answer.required = true; answer.placeholder = "Your answer";
    // Optional: the answer is also pinned as the anchor of this key.
    const pin = el("label", "pin", "Pin as anchor ");
    const key = el("input");
    key.name = "pin_as"; key.maxLength = 80; key.placeholder = "key, e.g. output-format (optional)";
    pin.append(key);
    form.append(csrf, answer, pin, el("button", "", "Answer and resume"));
    li.append(meta, el("p", "question", r.question), form);
    inbox.prepend(li);
    refreshEmpty();
  }

  function remove(r) {
    const li = inbox.querySelector(`li[data-id="${r.id}"]`);
    if (li) li.remove();
    refreshEmpty();
  }

  // On (re)connect: the open requests as of now; drop what was answered meanwhile.
  function settle(requests) {
    const open = new Set(requests.map((r) => String(r.id)));
    inbox.querySelectorAll("li[data-id]").forEach((li) => {
      if (!open.has(li.dataset.id)) li.remove();
    });
    [...requests].reverse().forEach(add);
    refreshEmpty();
  }

  // 80% of a budget used: said until the budget is raised (the page lists them).
  function warn(w) {
    const list = document.getElementById("budget-warnings");
    const which = w.budget === "turns" ? "turn" : "cost";
    const shown = (n) => (w.budget === "turns" ? String(n) : `$${Number(n).toFixed(2)}`);
    const li = el("li", "budget-warning");
    li.dataset.team = w.team;
    const link = el("a", "", w.team);
    link.href = cfg.team_url.replace("SLUG", encodeURIComponent(w.team));
    // An agent's own cost budget names the agent (the team's budgets have no `agent`).
    const line = w.agent
      ? `${w.agent} has used ${Math.floor(w.percent)}% of its ${shown(w.limit)} cost budget (${shown(w.used)}).`
      : `${Math.floor(w.percent)}% of the ${which} budget used (${shown(w.used)} of ${shown(w.limit)}).`;
    li.append(link, document.createTextNode(`: ⚠ ${line}`));
    list.append(li);
  }

  // An agent in significant drift two turns running (teams.run.drift_alerts).
  function driftAlert(a) {
    const li = el("li", "drift-alert");
    li.dataset.team = a.team;
    const link = el("a", "", a.team);
    link.href = cfg.team_url.replace("SLUG", encodeURIComponent(a.team));
    li.append(link, document.createTextNode(`: ⚠ ${a.text}`));
    document.getElementById("drift-alerts").append(li);
  }

  window.loomLive(() => cfg.ws, {
    "budget.warning": warn,
    "drift.alert": driftAlert,
    "pm_request.opened": (e) => add(e.request),
    "pm_request.answered": (e) => remove(e.request),
    "pm_request.open_list": (e) => settle(e.requests),
  });
})();
