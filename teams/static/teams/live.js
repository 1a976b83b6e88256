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

  // --- following the conversation ------------------------------------------------
  // The conversation scrolls in its own box. New messages scroll it along while the
  // reader is at its bottom; a reader who scrolled up stays put and is offered
  // "Jump to latest" with the count of what arrived since.
  const jump = $("jump-latest");
  let unseen = 0;
  const atBottom = () =>
    conversation.scrollHeight - conversation.scrollTop - conversation.clientHeight < 40;
  function toLatest() {
    conversation.scrollTop = conversation.scrollHeight;
    unseen = 0;
    jump.hidden = true;
  }
  jump.addEventListener("click", toLatest);
  conversation.addEventListener("scroll", () => { if (atBottom()) toLatest(); });
  toLatest();

  // --- times: relative on the line, exact on hover ----------------------------------
  function ago(date) {
    const seconds = Math.max(0, Math.round((Date.now() - date.getTime()) / 1000));
    if (seconds < 10) return "just now";
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return date.toLocaleDateString();
  }
  function timeEl(iso) {
    const node = el("time", "when");
    node.dateTime = iso;
    node.title = new Date(iso).toLocaleString();
    node.textContent = ago(new Date(iso));
    return node;
  }
  function refreshTimes() {
    conversation.querySelectorAll("time.when").forEach((node) => {
      const date = new Date(node.dateTime);
      node.title = date.toLocaleString();
      node.textContent = ago(date);
    });
  }
  refreshTimes();
  setInterval(refreshTimes, 15000);

  // --- a turn's tokens, cost and duration, on its last message (as the server does) --
  function turnFigures(t) {
    const tokens = t.input_tokens + t.output_tokens + t.cache_creation_tokens + t.cache_read_tokens;
    const cost = Number(t.cost_usd);
    let line = `${tokens.toLocaleString("en")} tokens · $${cost.toFixed(4)}`;
    let title = `Turn ${t.number}, ${t.model || "no model call"}: ` +
      `${t.input_tokens.toLocaleString("en")} input, ` +
      `${t.cache_read_tokens.toLocaleString("en")} read from cache, ` +
      `${t.cache_creation_tokens.toLocaleString("en")} written to cache, ` +
      `${t.output_tokens.toLocaleString("en")} output tokens; $${cost.toFixed(6)}`;
    if (t.duration_seconds !== null && t.duration_seconds !== undefined) {
      line += ` · ${t.duration_seconds.toFixed(1)} s`;
      title += `; ${t.duration_seconds.toFixed(2)} s`;
    }
    return {line, title};
  }
  const finishedTurns = new Map(); // turn id -> figures, for messages that come later
  function showTurnFigures(turnId) {
    const figures = finishedTurns.get(turnId);
    const items = conversation.querySelectorAll(`li[data-turn="${turnId}"]`);
    if (!figures || !items.length) return;
    items.forEach((li) => li.querySelectorAll(".turn-meta").forEach((n) => n.remove()));
    const meta = el("span", "turn-meta", figures.line);
    meta.title = figures.title;
    const head = items[items.length - 1].querySelector(".msg-head");
    head.insertBefore(meta, head.querySelector(".fork-here"));
  }

  // Every message shown is numbered (1 the team's first), the number a fork and the
  // compare page use too; it links to the message's turn page when a turn wrote it.
  function numberLink(m) {
    if (!m.turn_id) return el("span", "msg-n");
    const link = el("a", "msg-n");
    link.href = cfg.turn_url.replace("/0/", `/${m.turn_id}/`);
    return link;
  }
  function renumber() {
    const first = conversation.querySelector("li[data-id]");
    let n = first && first.dataset.n ? Number(first.dataset.n) : cfg.first_number;
    conversation.querySelectorAll("li[data-id]").forEach((li) => {
      li.dataset.n = n;
      const mark = li.querySelector(".msg-n");
      mark.textContent = `#${n}`;
      mark.title = li.dataset.turn
        ? `Message ${n}: its turn, and what the model read` : `Message ${n}`;
      const fork = li.querySelector(".fork-here");
      if (fork) fork.setAttribute("aria-label", `Fork at message ${n}`);
      n += 1;
    });
  }

  // --- working notes: what an agent writes beside its tool calls ----------------------
  // It streams in the "is speaking" box with the rest; the turn's message is only the
  // text of the reply that ended the turn, so once the turn is done the notes are
  // asked for (the stream is not kept, and may have been missed) and shown, collapsed,
  // under the turn's first message, as the server renders them after a reload.
  const streams = new Map(); // turn id -> {text, whole: seen from its start}
  function streamOf(turnId) {
    if (!streams.has(turnId)) streams.set(turnId, {text: "", whole: false});
    return streams.get(turnId);
  }
  // A tool ran (its private record arrived): what the agent writes next is a new paragraph.
  function toolRan(m) {
    const stream = streams.get(m.turn_id);
    if (!stream || !stream.text || stream.text.endsWith("\n")) return;
    stream.text += "\n\n";
    if (speaking.dataset.turn === String(m.turn_id)) $("speaking-text").textContent += "\n\n";
  }
  const squeezed = (text) => text.replace(/\s+/g, "");
  function turnMessages(turnId) {
    return [...conversation.querySelectorAll(`li[data-turn="${turnId}"]`)];
  }
  // Notes are asked for only when there may be some: the page saw more text than the
  // turn's messages hold, or did not see all it streamed.
  function mayHaveNotes(turnId) {
    const stream = streams.get(turnId);
    if (!stream || !stream.whole) return true;
    const said = turnMessages(turnId).map((li) => li.querySelector(".content").textContent);
    return squeezed(stream.text) !== "" && squeezed(stream.text) !== squeezed(said.join(""));
  }
  function showNotes(turnId, notes) {
    const li = turnMessages(turnId)[0];
    if (!li || !notes) return;
    let box = li.querySelector("details.working-notes");
    if (!box) {
      box = el("details", "working-notes");
      box.append(el("summary", "", "Working notes"), el("div", "notes-text"));
      li.append(box);
    }
    box.querySelector(".notes-text").textContent = notes;
  }
  function askNotes(turnId) {
    const url = cfg.notes_url.replace("/turns/0/", `/turns/${turnId}/`);
    fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then((response) => (response.ok ? response.json() : null))
      .then((body) => { if (body) showNotes(turnId, body.notes); })
      .catch(() => {});
  }
  function notesAfter(t) {
    if (t.status !== "done") {  // waiting for the PM: it goes on later, the stream cut
      streamOf(t.id).whole = false;
      return;
    }
    if (turnMessages(t.id).length && mayHaveNotes(t.id)) askNotes(t.id);
    streams.delete(t.id);
  }

  function addMessage(m) {
    if (m.recipient && m.turn_id && m.kind === "tool_call") toolRan(m);
    // Private inbox traffic stays out of the team view; the PM's nudges are shown.
    if (m.recipient && m.kind !== "nudge") return;
    if (conversation.querySelector(`li[data-id="${m.id}"]`)) return;
    const empty = $("no-messages");
    if (empty) empty.remove();
    const following = atBottom();
    const li = el("li", `msg kind-${m.kind}`);
    li.dataset.id = m.id;
    if (m.turn_id) li.dataset.turn = m.turn_id;
    const speaker = el("span", "speaker", m.speaker);
    if (m.kind === "nudge") {
      speaker.append(` → ${m.recipient} `, el("small", "", `(nudge, only ${m.recipient} reads it)`));
    }
    const head = el("div", "msg-head");
    head.append(numberLink(m), speaker, el("span", "phase", m.phase), timeEl(m.created_at));
    li.append(head, el("div", "content", m.content));
    // Keep id order: catch-up after a reconnect may deliver older messages late.
    const last = conversation.querySelector("li[data-id]:last-child");
    const later = !last || Number(last.dataset.id) < m.id ? null
      : [...conversation.querySelectorAll("li[data-id]")].find((o) => Number(o.dataset.id) > m.id);
    conversation.insertBefore(li, later);
    renumber();
    if (m.turn_id) showTurnFigures(m.turn_id);
    if (speaking.dataset.agent === m.speaker) stopSpeaking();
    if (following) {
      toLatest();
    } else {
      unseen += 1;
      jump.textContent = `Jump to latest (${unseen} new)`;
      jump.hidden = false;
    }
  }

  // What the PM may do follows the team's state without a reload: steering only
  // while it takes turns, "Run again" only once it is not running, and a banner of
  // an earlier action goes once the state has moved on.
  let shownStatus = cfg.status;
  function followState(status) {
    if (!status) return;
    const done = status === "done";
    document.querySelectorAll("#roster form.steer").forEach((form) => { form.hidden = done; });
    $("run-again-head").hidden = !cfg.run_again_statuses.includes(status) || done;
    if (status !== shownStatus) {
      const flash = $("flash");
      if (flash) flash.remove();
      shownStatus = status;
    }
  }

  function stopSpeaking() {
    speaking.hidden = true;
    speaking.dataset.agent = "";
    speaking.dataset.turn = "";
    $("speaking-text").textContent = "";
  }

  function setStatus(t) {
    const status = $("team-status");
    status.textContent = t.status_label || t.status;
    status.className = `status status-${t.status}`;
    $("team-phase").textContent = t.phase;
    $("team-turns").textContent = t.turn_count;
    if (t.spent_usd !== undefined) $("team-cost").textContent = t.spent_usd;
    if (t.max_turns !== undefined) showBudgets(t);
    if (t.actions) {
      // Only the actions the status allows are shown (an idle team Start, a paused
      // one Resume, never both).
      document.querySelectorAll("form.actions button[name=action]").forEach((button) => {
        button.disabled = button.hidden = !t.actions.includes(button.value);
      });
    }
    followState(t.status);
    // On (re)connect the server says how many missed messages it did not send.
    if ("catch_up_omitted" in t) showOmitted(t.catch_up_omitted);
    // On (re)connect the server says which PM request, if any, is open now.
    if ("pm_request" in t) {
      if (t.pm_request) showRequest(t.pm_request);
      else $("pm-request").hidden = true;
    }
  }

  // Turns and cost against their budgets; a warning line per budget from the share
  // the server names (worded by the server's template).
  function showBudgets(t) {
    const share = cfg.budget_warning_share;
    const budgets = [
      ["turn", t.turn_count, t.max_turns, (n) => n.toLocaleString("en"), "turns-meter"],
      ["cost", Number(t.spent_usd), Number(t.max_cost_usd),
       (n) => `$${n.toLocaleString("en", {minimumFractionDigits: 2, maximumFractionDigits: 2})}`,
       "cost-meter"],
    ];
    $("team-max-turns").textContent = t.max_turns;
    $("team-max-cost").textContent = Number(t.max_cost_usd).toFixed(2);
    const list = $("budget-warnings");
    list.replaceChildren();
    budgets.forEach(([budget, used, limit, shown, meterId]) => {
      const meter = $(meterId);
      meter.max = limit;
      meter.high = limit * share;
      meter.value = used;
      if (!limit || used < limit * share) return;
      const line = cfg.budget_warning
        .replace("{percent}", Math.floor((100 * used) / limit))
        .replace("{budget}", budget)
        .replace("{used}", shown(used))
        .replace("{limit}", shown(limit));
      list.append(el("li", "budget-warning", line));
    });
  }

  // An agent's own cost budget at 80% (budget.warning naming it; the team's budgets
  // are said from the status above): one line per agent, worded by the server's template.
  function showAgentBudgetWarning(w) {
    if (!w.agent) return;
    const dollars = (n) =>
      `$${Number(n).toLocaleString("en", {minimumFractionDigits: 2, maximumFractionDigits: 2})}`;
    const list = $("agent-budget-warnings");
    let li = list.querySelector(`li[data-agent="${CSS.escape(w.agent)}"]`);
    if (!li) {
      li = el("li", "budget-warning");
      li.dataset.agent = w.agent;
      list.append(li);
    }
    li.textContent = cfg.agent_budget_warning
      .replace("{agent}", w.agent)
      .replace("{percent}", Math.floor((100 * w.used) / w.limit))
      .replace("{limit}", dollars(w.limit))
      .replace("{used}", dollars(w.used));
  }

  // Catch-up is bounded: say how many earlier updates (events) are missing.
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
    const what = count === 1 ? "1 earlier update was" : `${count} earlier updates were`;
    note.textContent = `${what} not sent live; reload the page to see them.`;
  }

  function showRequest(r) {
    const box = $("pm-request");
    box.dataset.id = r.id;
    $("pm-question").textContent = r.question;
    $("pm-answer-form").action = cfg.answer_url.replace("/0/", `/${r.id}/`);
    // A budget request: quick choices (the server's) above the answer box.
    const budget = r.kind === "budget";
    box.dataset.kind = r.kind || "question";
    $("pm-request-title").textContent = budget
      ? "A budget is reached: the PM decides" : "The coach asks the PM";
    // An approval request: Approve / Always approve / Deny, a note, edited arguments.
    const approval = r.kind === "approval";
    if (approval) $("pm-request-title").textContent = "An agent asks to call a tool";
    $("pm-text-answer").hidden = approval;
    $("pm-answer-form").querySelector("textarea[name=answer]").required = !approval;
    $("pm-approval").hidden = !approval;
    $("pm-question").hidden = approval;  // the card below says it, laid out
    $("pm-arguments").value = approval && r.arguments ? JSON.stringify(r.arguments, null, 2) : "";
    if (approval) showApproval(r);
    const choices = $("pm-budget-choices");
    choices.hidden = !budget;
    choices.querySelectorAll("button[name=answer]").forEach((b, i) => {
      if (budget && r.choices && r.choices[i]) b.value = b.textContent = r.choices[i];
    });
    // A stuck request (teams.run.stuck): its three answers, no text.
    const stuck = r.kind === "stuck";
    if (stuck) {
      $("pm-request-title").textContent = "The team asks for help: it seems stuck";
      $("pm-text-answer").hidden = true;
      $("pm-answer-form").querySelector("textarea[name=answer]").required = false;
    }
    $("pm-stuck-choices").hidden = !stuck;
    box.hidden = false;
  }

  // An approval: who calls what, why, and each argument in a monospace block.
  function showApproval(r) {
    $("pm-approval-agent").textContent = r.agent || "An agent";
    $("pm-note-agent").textContent = r.agent || "the agent";
    $("pm-approval-tool").textContent = r.tool;
    $("pm-approval-why").textContent = r.why || "(the agent gave no reason with this call)";
    const args = $("pm-approval-args");
    args.replaceChildren();
    (r.arguments_shown || []).forEach(([name, value]) => {
      const dd = el("dd");
      dd.append(el("pre", "", value));
      args.append(el("dt", "", name), dd);
    });
    if (!args.children.length) args.append(el("dt", "", "(none)"));
    $("pm-note").value = "";
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
  // words come from the server: teams/run/drift.py); the rest of the panel (hierarchy,
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
                el("small", "", d.role === d.agent ? "" : d.role), document.createTextNode(" "),
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
      speaking.dataset.turn = e.turn_id;
      $("speaking-agent").textContent = e.agent;
      $("speaking-text").textContent = "";
      // Seen from its start only when this is the turn's own start (a delta of a turn
      // begun before the page came is not), and not a turn resumed after an approval.
      const fresh = !streams.has(e.turn_id);
      streamOf(e.turn_id).whole = fresh ? e.number !== undefined : false;
    },
    "text.delta": (e) => {
      if (speaking.dataset.agent !== e.agent) handlers["turn.started"](e);
      streamOf(e.turn_id).text += e.text;
      $("speaking-text").textContent += e.text;
    },
    "turn.finished": (e) => {
      setStatus(e.team);
      finishedTurns.set(e.turn.id, turnFigures(e.turn));
      showTurnFigures(e.turn.id);
      if (speaking.dataset.agent === e.turn.agent) stopSpeaking();
      turnFinished(e.turn);
      notesAfter(e.turn);
    },
    "team.status": (e) => {
      // A (re)connect: deltas sent meanwhile are gone, so no stream is whole.
      if ("head" in e) streams.forEach((stream) => { stream.whole = false; });
      setStatus(e);
      refreshDrift();
    },
    "pm_request.opened": (e) => showRequest(e.request),
    "pm_request.answered": (e) => hideRequest(e.request),
    "query.asked": (e) => showQuery(e.query),
    "query.forwarded": (e) => showQuery(e.query),
    "query.answered": (e) => showQuery(e.query),
    "query.expired": (e) => showQuery(e.query),
    // Steering (teams.run.steering): the roster marks the chosen speaker until it speaks.
    "steer.next_speaker": (e) => markNextSpeaker(e.agent),
    "budget.warning": showAgentBudgetWarning,
    "drift.alert": (e) => {
      const li = el("li", "drift-flag drift-alert", `⚠ ${e.text}`);
      li.dataset.agent = e.agent;
      $("drift-flags").append(li);
    },
  };

  function markNextSpeaker(name) {
    document.querySelectorAll("#roster .next-speaker").forEach((n) => n.remove());
    const item = name && document.querySelector(`#roster li[data-agent="${CSS.escape(name)}"]`);
    if (item) item.insertBefore(el("small", "next-speaker", " speaks next"), item.querySelector("form"));
  }
  const started = handlers["turn.started"];
  handlers["turn.started"] = (e) => {
    const marked = document.querySelector("#roster .next-speaker");
    if (marked && marked.parentElement.dataset.agent === e.agent) markNextSpeaker(null);
    started(e);
  };

  // --- posting as PM: in place, without a reload ------------------------------------
  // (Without the script the form posts and the page reloads, which works too.)
  const postForm = $("post-form");
  const postText = $("post-content");
  const postStatus = $("post-status");
  const estimate = $("post-estimate");
  function say(text, kind) {
    postStatus.textContent = text;
    postStatus.className = `post-status post-${kind}`;
    postStatus.hidden = !text;
  }
  // Large texts: their estimated tokens (about 4 characters each), which every later
  // turn will read, and the limit.
  postText.addEventListener("input", () => {
    const chars = postText.value.length;
    const tokens = Math.ceil(chars / 4);
    if (chars > cfg.post_limit) {
      estimate.textContent = `Too long: ${chars.toLocaleString("en")} characters ` +
        `(about ${tokens.toLocaleString("en")} tokens); at most ` +
        `${cfg.post_limit.toLocaleString("en")} characters are accepted.`;
      estimate.className = "hint post-estimate over";
    } else if (tokens >= 500) {
      estimate.textContent = `About ${tokens.toLocaleString("en")} tokens: every later turn ` +
        "reads this.";
      estimate.className = "hint post-estimate";
    }
    estimate.hidden = tokens < 500 && chars <= cfg.post_limit;
  });
  postForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const button = postForm.querySelector("button");
    button.disabled = true;
    say("Posting…", "pending");
    fetch(postForm.action, {
      method: "POST",
      body: new FormData(postForm),
      credentials: "same-origin",
      headers: {Accept: "application/json"},
    })
      .then((response) => response.json().catch(() => ({detail: `The server answered ${response.status}.`}))
        .then((body) => ({ok: response.ok, body})))
      .then(({ok, body}) => {
        say(body.detail, ok ? "ok" : "error");
        if (ok) {
          postText.value = "";
          estimate.hidden = true;
        }
      })
      .catch(() => say("Not posted: the server could not be reached. Try again.", "error"))
      .finally(() => { button.disabled = false; });
  });

  // "Run again" makes a team: a double click must not make two.
  const runAgain = $("run-again");
  if (runAgain) runAgain.form.addEventListener("submit", () => { runAgain.disabled = true; });
  const endRunAgain = $("end-run-again");
  if (endRunAgain) {
    endRunAgain.form.addEventListener("submit", () => { endRunAgain.disabled = true; });
  }

  // --- the panels, live: files, anchors, keepers, consultations, intents -----------
  // Each comes from its own declared event (teams/live/events.py), sent once the change
  // is committed; nothing here needs a reload.
  const plural = (n, word) => `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
  function emptied(id) { const node = $(id); if (node) node.remove(); }
  function capped(list, limit) {
    while (list.children.length > limit) list.lastElementChild.remove();
  }
  function showFileCount(n) {
    $("workspace-link").textContent = `Workspace (${plural(n, "file")})`;
    $("end-files").textContent = n;
    $("end-files-s").textContent = n === 1 ? "" : "s";
  }

  function showFile(e) {
    const f = e.file, list = $("files");
    emptied("no-files");
    let li = list.querySelector(`li[data-path="${CSS.escape(f.path)}"]`);
    if (li) li.remove();
    li = el("li", "file");
    li.dataset.path = f.path;
    const link = el("a", "file-path", f.path);
    link.href = `${cfg.file_url}?path=${encodeURIComponent(f.path)}`;
    const size = f.size === 1 ? "1 byte" : `${f.size.toLocaleString("en")} bytes`;
    const who = f.agent ? `${f.agent}${f.turn ? `, turn ${f.turn}` : ""}` : "not written by an agent";
    li.append(link, document.createTextNode(" "), el("small", "file-meta", `${size} · ${who}`));
    list.prepend(li);
    capped(list, cfg.recent_files);
    showFileCount(e.files);
  }

  function showAnchor(e) {
    const a = e.anchor, list = $("anchors");
    emptied("no-anchors");
    let li = list.querySelector(`li[data-key="${CSS.escape(a.key)}"]`);
    if (!li) {
      li = el("li", "anchor");
      li.dataset.key = a.key;
      // Keep the keys in order, as the page renders them.
      const later = [...list.querySelectorAll("li[data-key]")].find((o) => o.dataset.key > a.key);
      list.insertBefore(li, later || null);
    }
    const value = a.value.length > 300 ? a.value.slice(0, 299) + "…" : a.value;
    li.replaceChildren(el("code", "anchor-key", a.key), document.createTextNode(" "),
                       el("span", "anchor-value", value), document.createTextNode(" "),
                       el("small", "anchor-source", a.source));
    $("anchor-count").textContent = e.anchors;
  }

  function dropAnchor(e) {
    const li = $("anchors").querySelector(`li[data-key="${CSS.escape(e.key)}"]`);
    if (li) li.remove();
    $("anchor-count").textContent = e.anchors;
  }

  function showKeeper(e) {
    const k = e.keeper, list = $("keepers");
    emptied("no-keepers");
    if (list.querySelector(`li[data-keeper="${k.id}"]`)) return;
    const li = el("li", "keeper");
    li.dataset.keeper = k.id;
    li.append(el("span", "keeper-agent", k.agent || "(an agent)"),
              document.createTextNode(`: keeper ${k.id} “`), el("span", "keeper-topic", k.topic),
              document.createTextNode("”, "), el("span", "keeper-count", k.messages),
              document.createTextNode(k.messages === 1 ? " message" : " messages"));
    list.prepend(li);
    capped(list, cfg.recent_keepers);
  }

  // A text whole when it fits, else cut after its last whole word, with "…"
  // (teams/web/presentation.py shortened, which the page renders with).
  function shortened(text, limit) {
    if (text.length <= limit) return text;
    let head = text.slice(0, limit - 1);
    if (!/\s/.test(text[limit - 1])) {
      const space = Math.max(head.lastIndexOf(" "), head.lastIndexOf("\n"));
      if (space > Math.floor(limit / 2)) head = head.slice(0, space);
    }
    return head.trimEnd() + "…";
  }

  // One consultant's column, as the page renders it (templates/teams/team_live.html).
  function consultant(c) {
    const section = el("section", `consultant status-${c.status}`);
    section.dataset.consultant = c.consultant;
    const title = el("h3");
    title.append(el("span", "consultant-name", c.consultant), document.createTextNode(" "),
                 el("small", "consultant-model", c.model));
    const meta = el("p", "consult-meta");
    meta.append(el("span", "consult-status", c.status_label));
    if (c.answer && c.confidence !== null) {
      meta.append(document.createTextNode(" · confidence "),
                  el("span", "consult-confidence", Number(c.confidence).toFixed(2)));
    }
    meta.append(document.createTextNode(" · $"), el("span", "consult-cost", c.cost_usd));
    if (c.duration_seconds !== null) {
      meta.append(document.createTextNode(" · "),
                  el("span", "consult-duration", `${c.duration_seconds.toFixed(1)} s`));
    }
    section.append(title, meta);
    const items = (heading, className, rows, line) => {
      if (!rows.length) return;
      const list = el("ul", className);
      rows.forEach((row) => list.append(line(row)));
      section.append(el("h4", "", heading), list);
    };
    if (c.answer) {
      section.append(el("div", "consult-answer", c.answer));
      items("Key points", "consult-points", c.key_points, (p) => el("li", "", p));
      items("Suggested actions", "consult-actions", c.suggested_actions, (a) => {
        const li = el("li");
        li.append(el("span", `priority priority-${a.priority}`, a.priority),
                  document.createTextNode(` ${a.action}`));
        if (a.file) li.append(document.createTextNode(" "), el("code", "", a.file));
        li.append(document.createTextNode(`: ${a.rationale}`));
        return li;
      });
      if (c.file_references.length) {
        const files = el("p", "consult-files", "Files: ");
        c.file_references.forEach((r, i) => {
          files.append(el("code", "", r.lines ? `${r.path}:${r.lines}` : r.path));
          if (i < c.file_references.length - 1) files.append(document.createTextNode(", "));
        });
        section.append(files);
      }
    } else if (c.error) {
      section.append(el("p", "consult-error", c.error));
    }
    items("Dropped file references", "consult-dropped", c.dropped, (d) => {
      const li = el("li");
      li.append(el("code", "", d.path), document.createTextNode(`: ${d.reason}`));
      return li;
    });
    return section;
  }

  function showConsultation(e) {
    const b = e.batch, list = $("consultations");
    emptied("no-consultations");
    let li = list.querySelector(`li[data-batch="${CSS.escape(b.batch)}"]`);
    if (!li) {
      li = el("li", "consult-batch");
      li.dataset.batch = b.batch;
      list.prepend(li);
    }
    const ask = el("p", "consult-ask");
    ask.append(el("span", "consult-asker", b.agent || "(an agent)"));
    if (b.turn) ask.append(document.createTextNode(" "), el("small", "", `turn ${b.turn}`));
    const prompt = el("span", "consult-prompt", shortened(b.prompt, cfg.consult_prompt_shown));
    if (prompt.textContent !== b.prompt) prompt.title = b.prompt;
    ask.append(document.createTextNode(" asked: "), prompt);
    const columns = el("div", "consult-columns");
    b.consultations.forEach((c) => columns.append(consultant(c)));
    li.replaceChildren(ask, columns);
    capped(list, cfg.recent_batches);
  }

  // An agent's hierarchy changed: its drift card's levels and score, at once.
  function showIntent(e) {
    const li = driftItem(e.agent);
    if (!li.querySelector(".drift-head")) { refreshDrift(); return; }
    [["trajectory", e.trajectory], ["tactic", e.tactic], ["action", e.action]].forEach(
      ([level, value]) => {
        const dd = li.querySelector(`dd[data-level="${level}"]`);
        if (dd) dd.textContent = dd.title = value || cfg.not_set;
      });
    setScore(li, e.agent, e.drift_score);
  }

  // A finished team is a clear end: no post box; its outcome and "Run again" instead.
  function showEnd(t) {
    const done = t.status === "done";
    $("team-end").hidden = !done;
    postForm.hidden = done;
    if (!done) return;
    $("end-phases").textContent = cfg.phases.length;
    $("end-phases-s").textContent = cfg.phases.length === 1 ? "" : "s";
    $("end-phase-names").textContent = cfg.phases.join(", ");
    $("end-turns").textContent = t.turn_count;
    $("end-turns-s").textContent = t.turn_count === 1 ? "" : "s";
    if (t.spent_usd !== undefined) $("end-cost").textContent = t.spent_usd;
  }

  // The PM's answer joins the conversation too: its estimated tokens, as the post box's.
  const answerText = $("pm-answer-text"), answerEstimate = $("pm-answer-estimate");
  answerText.addEventListener("input", () => {
    const chars = answerText.value.length;
    const tokens = Math.ceil(chars / 4);
    if (chars > cfg.post_limit) {
      answerEstimate.textContent = `Too long: ${chars.toLocaleString("en")} characters ` +
        `(about ${tokens.toLocaleString("en")} tokens); at most ` +
        `${cfg.post_limit.toLocaleString("en")} characters are accepted.`;
      answerEstimate.className = "hint post-estimate over";
    } else if (tokens >= 500) {
      answerEstimate.textContent = `About ${tokens.toLocaleString("en")} tokens: every later ` +
        "turn reads this.";
      answerEstimate.className = "hint post-estimate";
    }
    answerEstimate.hidden = tokens < 500 && chars <= cfg.post_limit;
  });

  handlers["file.written"] = showFile;
  handlers["anchor.saved"] = showAnchor;
  handlers["anchor.deleted"] = dropAnchor;
  handlers["keeper.created"] = showKeeper;
  handlers["consultation.closed"] = showConsultation;
  handlers["agent.intent"] = showIntent;
  const statusHandler = handlers["team.status"];
  handlers["team.status"] = (e) => { statusHandler(e); showEnd(e); };
  const turnHandler = handlers["turn.finished"];
  handlers["turn.finished"] = (e) => { turnHandler(e); showEnd(e.team); };

  // --- in sequence: nothing missed, nothing twice -------------------------------------
  // Each event of the team carries `seq`, the team's sequence number. The page keeps
  // the last it applied (at first the one it was rendered at): an event it already
  // had is dropped; one that skips a number makes it reconnect with `after_seq`, and
  // the server sends what is missing from the database. (The server fills gaps it
  // sees itself, so this is the second net.) Catch-up events (`catch_up`) are
  // trusted: what a bounded catch-up left out, the status counts.
  let lastSeq = cfg.seq || 0;
  let live = null;
  function inSequence(e) {
    if (typeof e.seq !== "number") {
      if (typeof e.head === "number") lastSeq = Math.max(lastSeq, e.head);
      return true;
    }
    if (e.seq <= lastSeq) return false;
    if (e.seq > lastSeq + 1 && !e.catch_up) {
      if (live) live.reconnect();
      return false;
    }
    lastSeq = e.seq;
    return true;
  }
  // Every event passes through inSequence, a name this page does not show too.
  const sequenced = new Proxy(handlers, {
    get: (target, name) => (e) => { if (inSequence(e) && target[name]) target[name](e); },
  });

  // `after_seq` lets the server send what this page missed while not connected.
  live = window.loomLive(() => `${cfg.ws}?after_seq=${lastSeq}`, sequenced);
})();
