// Live updates for a team's page. Agent output is untrusted: it only ever goes
// into the page as text (textContent), never as HTML.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("live-config").textContent);
  const $ = (id) => document.getElementById(id);
  const conversation = $("conversation");
  const speaking = $("speaking");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function addMessage(m) {
    if (m.recipient) return; // private inbox traffic stays out of the team view
    if (conversation.querySelector(`li[data-id="${m.id}"]`)) return;
    const empty = $("no-messages");
    if (empty) empty.remove();
    const li = el("li", `msg kind-${m.kind}`);
    li.dataset.id = m.id;
    li.append(el("span", "speaker", m.speaker), el("span", "phase", m.phase),
              el("div", "content", m.content));
    // Follow the conversation only when the reader is at the bottom already.
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    // Keep id order: catch-up after a reconnect may deliver older messages late.
    const last = conversation.querySelector("li[data-id]:last-child");
    const later = !last || Number(last.dataset.id) < m.id ? null
      : [...conversation.querySelectorAll("li[data-id]")].find((o) => Number(o.dataset.id) > m.id);
    conversation.insertBefore(li, later);
    if (speaking.dataset.agent === m.speaker) stopSpeaking();
    if (atBottom) li.scrollIntoView({block: "nearest"});
  }

  function stopSpeaking() {
    speaking.hidden = true;
    speaking.dataset.agent = "";
    $("speaking-text").textContent = "";
  }

  function setStatus(t) {
    const status = $("team-status");
    status.textContent = t.status_label || t.status;
    status.className = `status status-${t.status}`;
    $("team-phase").textContent = t.phase;
    $("team-turns").textContent = t.turn_count;
    if (t.spent_usd !== undefined) $("team-cost").textContent = t.spent_usd;
    if (t.actions) {
      // Only the actions the status allows are shown (an idle team Start, a paused
      // one Resume, never both).
      document.querySelectorAll("form.actions button[name=action]").forEach((button) => {
        button.disabled = button.hidden = !t.actions.includes(button.value);
      });
    }
    // On (re)connect the server says how many missed messages it did not send.
    if ("catch_up_omitted" in t) showOmitted(t.catch_up_omitted);
    // On (re)connect the server says which PM request, if any, is open now.
    if ("pm_request" in t) {
      if (t.pm_request) showRequest(t.pm_request);
      else $("pm-request").hidden = true;
    }
  }

  // Catch-up on connect is bounded: say how many earlier messages are missing.
  function showOmitted(count) {
    let note = $("catch-up-note");
    if (!count) {
      if (note) note.remove();
      return;
    }
    if (!note) {
      note = el("p", "live-notice catch-up-note");
      note.id = "catch-up-note";
      note.setAttribute("role", "status");
      conversation.before(note);
    }
    const what = count === 1 ? "1 earlier message was" : `${count} earlier messages were`;
    note.textContent = `${what} not sent live; reload the page to see them.`;
  }

  function lastId() {
    const ids = [...conversation.querySelectorAll("li[data-id]")].map((li) => Number(li.dataset.id));
    return ids.length ? Math.max(...ids) : 0;
  }

  function showRequest(r) {
    const box = $("pm-request");
    box.dataset.id = r.id;
    $("pm-question").textContent = r.question;
    $("pm-answer-form").action = cfg.answer_url.replace("/0/", `/${r.id}/`);
    box.hidden = false;
  }

  function hideRequest(r) {
    const box = $("pm-request");
    if (String(box.dataset.id) === String(r.id)) box.hidden = true;
  }

  // Questions between agents: one entry per query, its hop chain a compact line
  // per ask, forward, answer or expiry; the newest query on top.
  function showQuery(q) {
    const list = $("queries");
    const empty = $("no-queries");
    if (empty) empty.remove();
    let li = list.querySelector(`li[data-key="${q.key}"]`);
    if (!li) {
      li = el("li");
      li.dataset.key = q.key;
      list.prepend(li);
    }
    li.className = `query status-${q.status}`;
    const question = q.question.length > 140 ? q.question.slice(0, 139) + "…" : q.question;
    const hops = el("ul", "hops");
    q.lines.forEach((line) => hops.append(el("li", "", line)));
    li.replaceChildren(el("span", "key", q.key), document.createTextNode(" "),
                       el("span", "question", question), hops);
  }

  // Drift: the score and what it means change with each finished turn (the band
  // words come from the server: teams/drift.py); the rest of the panel (hierarchy,
  // chain breaks, advice) is asked for again.
  function meaningOf(score) {
    const band = cfg.drift_bands.find(([lowest]) => score >= lowest);
    return band ? band[1] : "";
  }

  function driftItem(agent) {
    const panel = $("drift-panel");
    let li = panel.querySelector(`li[data-agent="${CSS.escape(agent)}"]`);
    if (!li) {
      li = el("li", "drift-agent");
      li.dataset.agent = agent;
      panel.append(li);
    }
    return li;
  }

  function setScore(li, agent, score) {
    const meaning = meaningOf(score);
    const flagged = score < cfg.drift_flag_below;
    li.className = `drift-agent drift-${meaning.replace(/ /g, "-")}${flagged ? " drift-flagged" : ""}`;
    const head = li.querySelector(".drift-head");
    if (head) {
      head.querySelector(".drift-score").textContent = score;
      head.querySelector(".drift-meaning").textContent = meaning;
    }
    const flags = $("drift-flags");
    let flag = flags.querySelector(`li[data-agent="${CSS.escape(agent)}"]`);
    if (!flagged) {
      if (flag) flag.remove();
      return;
    }
    if (!flag) {
      flag = el("li", "drift-flag");
      flag.dataset.agent = agent;
      flags.append(flag);
    }
    flag.textContent = `⚠ ${agent}: ${meaning} (${score})`;
  }

  function showDrift(d) {
    const li = driftItem(d.agent);
    const head = el("div", "drift-head");
    head.append(el("span", "drift-name", d.agent), document.createTextNode(" "),
                el("small", "", d.role), document.createTextNode(" "),
                el("span", "drift-score"), el("span", "drift-of", "/100"),
                document.createTextNode(" "), el("span", "drift-meaning"));
    const levels = el("dl", "drift-hierarchy");
    d.hierarchy.forEach(([level, value]) => {
      const dd = el("dd", "", value);
      dd.dataset.level = level;
      dd.title = value;
      levels.append(el("dt", "", level), dd);
    });
    const breaks = el("ul", "drift-breaks");
    d.breaks.forEach((line) => breaks.append(el("li", "", line)));
    li.replaceChildren(head, levels, breaks, el("p", "drift-advice", d.recommendation));
    setScore(li, d.agent, d.score);
  }

  // One request at a time; a turn that finishes meanwhile asks once more after it.
  let driftBusy = false, driftAgain = false;
  function refreshDrift() {
    if (driftBusy) { driftAgain = true; return; }
    driftBusy = true;
    fetch(cfg.drift_url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then((response) => (response.ok ? response.json() : null))
      .then((body) => { if (body) body.agents.forEach(showDrift); })
      .catch(() => {})
      .finally(() => {
        driftBusy = false;
        if (driftAgain) { driftAgain = false; refreshDrift(); }
      });
  }

  function turnFinished(t) {
    if (t.drift_score !== null && t.drift_score !== undefined) {
      setScore(driftItem(t.agent), t.agent, t.drift_score);
    }
    refreshDrift();
  }

  const handlers = {
    "message.created": (e) => addMessage(e.message),
    "turn.started": (e) => {
      speaking.hidden = false;
      speaking.dataset.agent = e.agent;
      $("speaking-agent").textContent = e.agent;
      $("speaking-text").textContent = "";
    },
    "text.delta": (e) => {
      if (speaking.dataset.agent !== e.agent) handlers["turn.started"](e);
      $("speaking-text").textContent += e.text;
    },
    "turn.finished": (e) => {
      setStatus(e.team);
      if (speaking.dataset.agent === e.turn.agent) stopSpeaking();
      turnFinished(e.turn);
    },
    "team.status": (e) => { setStatus(e); refreshDrift(); },
    "pm_request.opened": (e) => showRequest(e.request),
    "pm_request.answered": (e) => hideRequest(e.request),
    "query.asked": (e) => showQuery(e.query),
    "query.forwarded": (e) => showQuery(e.query),
    "query.answered": (e) => showQuery(e.query),
    "query.expired": (e) => showQuery(e.query),
  };

  // `after` lets the server send what this page missed while not connected.
  window.loomLive(() => `${cfg.ws}?after=${lastId()}`, handlers);
})();
