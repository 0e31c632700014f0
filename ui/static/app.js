// The page: plain JavaScript, no build step. Everything is drawn from the
// JSON API with textContent (never innerHTML), every string through the
// display rule the CLI uses (served as /static/display.js from
// runtime/base/display.ts): a control, bidi or invisible character shows as its
// escape, marked. The runs list is redrawn every POLL_MS; a run's page asks
// for what changed since it last looked, and stops once the run is finished.
"use strict";

const POLL_MS = 1500;
const CLOSED = ["done", "failed", "cancelled"];
const display = globalThis.agentDisplay;
const main = document.getElementById("main");
const live = document.getElementById("live");
let timer = 0;
let busy = false; // a person is typing in a box: do not redraw under them

/** Text as nodes: what is shown as it is, and each escape marked. */
function shown(text, opts) {
  return marked(display.displayParts(String(text), opts));
}

/** Parts of the display rule (plain, escaped, plain, ...) as nodes, each escape marked. */
function marked(parts) {
  if (parts.length === 1) return [document.createTextNode(parts[0])];
  return parts.map((p, i) => {
    if (i % 2 === 0) return document.createTextNode(p);
    const esc = document.createElement("span");
    esc.className = "esc";
    esc.title = "a control, bidi or invisible character, shown as its escape";
    esc.textContent = p;
    return esc;
  });
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style") el.style.cssText = v; // through the CSSOM: the page's CSP allows no inline style
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    if (c instanceof Node) el.append(c);
    else el.append(...shown(c));
  }
  return el;
}

function ago(ms) {
  if (ms === null || ms === undefined) return "-";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}
const time = (iso) => iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 23) : "-";
const badge = (s) => h("span", { class: `badge ${s}`, "data-status": s }, s);

function toast(text, error) {
  const t = h("div", { class: `toast${error ? " error" : ""}`, role: "status" }, text);
  document.body.append(t);
  setTimeout(() => t.remove(), 4000);
}

async function api(path, body) {
  const res = await fetch(
    path,
    body === undefined ? {} : {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    },
  );
  const data = await res.json().catch(() => ({ code: "UI_BAD_ANSWER", message: `HTTP ${res.status}` }));
  if (!res.ok) throw Object.assign(new Error(`${data.code}: ${data.message}`), data);
  return data;
}

async function act(path, body, done) {
  try {
    await api(path, body);
    toast(done);
  } catch (err) {
    toast(err.message, true);
  }
  busy = false;
  await refresh();
}

// ---- a new chat (when the page was given a conversing agent: `deno task dev`) ----

// Kept across the list's redraws, so what a person types stays in the box.
let newChat = null; // { agent, form, input, button }

/** The "new chat" box: its first message starts a run of the page's chat agent, then its page opens. */
function newChatBox(agent) {
  if (newChat?.agent === agent) return newChat.form;
  const input = h("textarea", {
    id: "new-chat-input",
    rows: 2,
    placeholder: `the first message to ${agent} (Enter sends, Shift+Enter a new line)`,
    onkeydown: (e) => {
      if (e.key === "Enter" && !e.shiftKey) {
        e.preventDefault();
        form.requestSubmit();
      }
    },
  });
  const button = h("button", { id: "new-chat-send", type: "submit", "data-action": "new-chat" }, "start");
  const form = h(
    "form",
    {
      id: "new-chat",
      class: "chat-form new-chat",
      onsubmit: (e) => {
        e.preventDefault();
        startChat(input, button);
      },
    },
    h("label", { for: "new-chat-input" }, "New chat with ", h("span", { class: "mono" }, agent)),
    input,
    button,
  );
  newChat = { agent, form, input, button };
  return form;
}

async function startChat(input, button) {
  const text = input.value;
  if (text.trim() === "") return;
  const chatId = `chat-${crypto.randomUUID().slice(0, 8)}`;
  const message = { id: crypto.randomUUID(), role: "user", parts: [{ type: "text", text }] };
  button.disabled = true;
  try {
    // The AI SDK's default chat transport's request; the run exists once it is answered, and its page
    // follows the answer (the stream this request opened ends with the navigation).
    const res = await fetch("/api/chat", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ id: chatId, messages: [message], trigger: "submit-message" }),
    });
    if (!res.ok) {
      const data = await res.json().catch(() => ({ code: "UI_BAD_ANSWER", message: `HTTP ${res.status}` }));
      throw new Error(`${data.code}: ${data.message}`);
    }
    input.value = "";
    location.assign(`/runs/${encodeURIComponent(chatId)}`);
  } catch (err) {
    toast(err.message, true);
    button.disabled = false;
  }
}

// ---- the runs list -------------------------------------------------------

function listState() {
  const q = new URLSearchParams(location.search);
  return {
    status: q.get("status") ?? "",
    agent: q.get("agent") ?? "",
    search: q.get("search") ?? "",
    page: Number(q.get("page") ?? 1),
  };
}

function goList(change) {
  const s = { ...listState(), page: 1, ...change };
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(s)) if (v !== "" && !(k === "page" && v === 1)) q.set(k, String(v));
  history.replaceState(null, "", `/${q.size ? `?${q}` : ""}`);
  refresh();
}

async function drawList() {
  const s = listState();
  const q = new URLSearchParams({ page: String(s.page), limit: "25" });
  if (s.status) q.set("status", s.status);
  if (s.agent) q.set("agent", s.agent);
  if (s.search) q.set("search", s.search);
  const [data, { schedules }] = await Promise.all([api(`/api/runs?${q}`), api("/api/schedules")]);
  const all = Object.values(data.counts).reduce((a, b) => a + b, 0);
  const chips = h(
    "div",
    { class: "chips", id: "counts" },
    h(
      "button",
      { class: `chip${s.status ? "" : " on"}`, onclick: () => goList({ status: "" }) },
      `all ${all}`,
    ),
    data.statuses.map((st) =>
      h("button", {
        class: `chip${s.status === st ? " on" : ""}`,
        "data-count": st,
        onclick: () => goList({ status: st }),
      }, `${st} ${data.counts[st] ?? 0}`)
    ),
  );
  const search = h("input", {
    type: "search",
    id: "search",
    placeholder: "search run id",
    value: s.search,
    onchange: (e) => goList({ search: e.target.value.trim() }),
  });
  const agent = h(
    "select",
    { id: "agent", onchange: (e) => goList({ agent: e.target.value }) },
    h("option", { value: "" }, "all agents"),
    data.agents.map((a) => h("option", { value: a, selected: a === s.agent }, a)),
  );
  const rows = data.runs.map((r) =>
    h(
      "tr",
      { "data-run": r.runId },
      h(
        "td",
        {},
        h("a", { href: `/runs/${encodeURIComponent(r.runId)}` }, r.runId),
        r.parentRunId ? h("span", { class: "muted" }, ` child of ${r.parentRunId}`) : "",
      ),
      h(
        "td",
        {},
        badge(r.status),
        r.flagged ? h("span", { class: "muted" }, ` ${r.flagged} flagged`) : "",
        r.waitingFor.length
          ? h(
            "span",
            { class: "muted", "data-limit": r.waitingFor.join(",") },
            ` for ${r.waitingFor.join(", ")}`,
          )
          : "",
      ),
      h("td", {}, r.agent),
      h(
        "td",
        { class: "mono", title: r.noWorker ?? "" },
        `${r.version ?? "-"}${r.mayMove ? "*" : ""}${r.moveTo ? ` → ${r.moveTo}` : ""}`,
        r.noWorker ? h("span", { class: "muted" }, " (no worker)") : "",
      ),
      h("td", { class: "num" }, r.toolCalls),
      h("td", { class: "num" }, r.llmCalls),
      h("td", { class: "num" }, r.inputTokens + r.outputTokens ? `${r.inputTokens}+${r.outputTokens}` : "-"),
      h("td", { class: "num" }, r.epoch),
      h("td", {}, ago(r.ageMs)),
      h("td", { class: "mono" }, r.owner ?? "-"),
      h("td", {}, r.heartbeatAgeMs === null ? "-" : `${ago(r.heartbeatAgeMs)} ago`),
    )
  );
  const heads = [
    "run",
    "status",
    "agent",
    "version",
    "tool calls",
    "model calls",
    "tokens in+out",
    "epoch",
    "age",
    "owner",
    "heartbeat",
  ];
  const table = h(
    "table",
    { id: "runs" },
    h("thead", {}, h("tr", {}, heads.map((t, i) => h("th", { class: i >= 4 && i <= 7 ? "num" : "" }, t)))),
    h(
      "tbody",
      {},
      rows.length ? rows : h("tr", {}, h("td", { colspan: 11, class: "muted" }, "No runs match.")),
    ),
  );
  const pager = h(
    "div",
    { class: "pager" },
    h("button", { disabled: s.page <= 1, onclick: () => goList({ ...s, page: s.page - 1 }) }, "newer"),
    h("span", { class: "muted" }, `page ${data.page} of ${data.pages}, ${data.total} runs`),
    h(
      "button",
      { disabled: s.page >= data.pages, onclick: () => goList({ ...s, page: s.page + 1 }) },
      "older",
    ),
  );
  // The limits shared by the fleet, when any was taken: what each key holds and who waits for it.
  const limits = data.limits.length === 0 ? "" : h(
    "table",
    { id: "limits" },
    h(
      "thead",
      {},
      h("tr", {}, ["limit", "", "in flight", "last minute", "waiting", "held"].map((t) => h("th", {}, t))),
    ),
    h(
      "tbody",
      {},
      data.limits.map((k) =>
        h(
          "tr",
          { "data-key": k.key },
          h("td", { class: "mono" }, k.key),
          h("td", { class: "muted" }, k.limit ?? ""),
          h("td", { class: "num" }, k.inFlight),
          h("td", { class: "num" }, k.lastMinute),
          h("td", { class: "num" }, k.waiting),
          h(
            "td",
            {},
            k.heldUntil ? `until ${k.heldUntil} (${k.holds} holds)` : k.holds ? `${k.holds} holds` : "-",
          ),
        )
      ),
    ),
  );
  const focused = document.activeElement?.id;
  main.replaceChildren(
    ...(data.newChat && !data.readOnly ? [newChatBox(data.newChat.agent)] : []),
    h("h2", {}, "Runs"),
    chips,
    h("div", { class: "filters" }, search, agent),
    h("div", { class: "scroll" }, table),
    pager,
    ...(schedules.length ? schedulesView(schedules) : []),
    limits,
  );
  if (focused === "search") search.focus();
  if (focused === "new-chat-input") newChat?.input.focus();
  return true;
}

/** The schedules: when each fires, its next occurrence, its last runs (links to them). */
function schedulesView(schedules) {
  const rows = schedules.map((s) =>
    h(
      "tr",
      { "data-schedule": s.name },
      h("td", {}, s.name),
      h("td", {}, s.agent),
      h(
        "td",
        { class: "mono" },
        s.cron !== null ? `${s.cron}${s.zone === "UTC" ? "" : ` (${s.zone})`}` : `every ${s.every}`,
      ),
      h("td", {}, `${s.overlap} / ${s.catchUp}`),
      h(
        "td",
        {},
        s.enabled ? time(s.nextAt) : badge("paused"),
        s.queuedAt ? h("span", { class: "muted" }, ` (${time(s.queuedAt)} queued)`) : "",
      ),
      h("td", { class: "num" }, s.skipped),
      h(
        "td",
        {},
        s.lastRuns.length
          ? s.lastRuns.map((r) =>
            h(
              "div",
              { "data-run": r.runId },
              h("a", { href: `/runs/${encodeURIComponent(r.runId)}` }, r.runId),
              " ",
              badge(r.status),
            )
          )
          : h("span", { class: "muted" }, "none yet"),
      ),
    )
  );
  const heads = ["schedule", "agent", "when", "overlap / catch-up", "next (UTC)", "skipped", "last runs"];
  return [
    h("h2", {}, "Schedules"),
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { id: "schedules" },
        h("thead", {}, h("tr", {}, heads.map((t) => h("th", { class: t === "skipped" ? "num" : "" }, t)))),
        h("tbody", {}, rows),
      ),
    ),
  ];
}

// ---- one run -------------------------------------------------------------

// What the page holds of the run it shows: the steps it has (a window from
// lo to hi), the lanes they are drawn in, and the values asked for whole.
const view = {
  runId: null,
  last: null, // the latest answer (run, totals, range, approvals)
  steps: new Map(),
  lo: null,
  hi: null,
  lanesKey: "",
  lanes: [], // [{first, last, reason, messages}]: planLanes
  laneOf: new Map(), // epoch -> the first epoch of its lane
  whole: new Map(), // `${field}@${seq}` -> the whole value, once asked for
};

function resetView(runId) {
  Object.assign(view, {
    runId,
    last: null,
    steps: new Map(),
    lo: null,
    hi: null,
    lanesKey: "",
    lanes: [],
    laneOf: new Map(),
    whole: new Map(),
  });
}

/**
 * A value that may have arrived clipped ({ value } or { head, chars }): JSON
 * as one line, text with its lines kept; a clipped one shows its start and a
 * button that fetches it whole.
 */
function valueView(clip, field, seq, asJson) {
  const key = `${field}@${seq ?? ""}`;
  const whole = view.whole.has(key) ? { value: view.whole.get(key) } : clip;
  const cls = asJson ? "value mono" : "value text";
  if ("value" in whole) {
    const v = whole.value;
    const nodes = asJson ? marked(display.displayJsonParts(v)) : shown(v ?? "", { newlines: true });
    const lines = !asJson && String(v ?? "").includes("\n") ? " lines" : "";
    return h("span", { class: cls + lines, "data-field": key }, nodes);
  }
  const box = h(
    "span",
    { class: cls, "data-field": key, "data-clipped": whole.chars },
    shown(whole.head, { newlines: !asJson }),
    h("span", { class: "muted" }, " …"),
  );
  box.append(
    " ",
    h("button", {
      class: "link",
      "data-action": "show-all",
      onclick: async () => {
        try {
          const q = new URLSearchParams({ field });
          if (seq !== undefined && seq !== null) q.set("seq", String(seq));
          const { value } = await api(`/api/runs/${encodeURIComponent(view.runId)}/value?${q}`);
          // A text field comes back as a JSON string: shown as text.
          view.whole.set(key, value);
          box.replaceWith(valueView({ value }, field, seq, asJson));
          if (field === "approval.args") drawCard();
        } catch (err) {
          toast(err.message, true);
        }
      },
    }, `show all ${whole.chars.toLocaleString("en")} characters`),
  );
  return box;
}

function eventView(ev) {
  return h(
    "div",
    { class: `event ${ev.kind} ${ev.status}` },
    h("span", { class: "muted" }, `${ev.kind} `),
    badge(ev.status),
    " ",
    ev.summary,
  );
}

/** The warning an approval box gives about what its arguments hide, or why they cannot be judged yet. */
function approvalWarning(args, clipped) {
  if (clipped) {
    return h(
      "div",
      { class: "warn", "data-warning": "clipped" },
      `The arguments are ${
        clipped.toLocaleString("en")
      } characters long and only their start is shown: show them all before you approve.`,
    );
  }
  const hidden = display.hiddenIn(args);
  if (hidden.count === 0) return "";
  return h(
    "div",
    { class: "warn", "data-warning": "hidden" },
    `⚠ These arguments hold ${hidden.count} control, bidi or invisible character${
      hidden.count === 1 ? "" : "s"
    } `,
    `(${
      hidden.escapes.join(" ")
    }), shown marked, as escapes. What you approve is exactly what is shown here, `,
    "not what it may look like elsewhere.",
  );
}

function approvalBox(a, readOnly) {
  const key = `approval.args@${a.seq}`;
  const args = view.whole.has(key) ? { value: view.whole.get(key) } : a.args;
  const clipped = "value" in args ? 0 : args.chars;
  const what = [h("code", {}, a.tool), " ", valueView(args, "approval.args", a.seq, true)];
  if (readOnly) {
    return h(
      "div",
      { class: "flagbox", "data-approval": a.key },
      h("div", {}, "Waiting for approval: ", what, ". This page is read-only."),
      approvalWarning(args.value, clipped),
    );
  }
  const reason = h("textarea", {
    placeholder: "why not (shown to the model if you deny)",
    onfocus: () => (busy = true),
  });
  const url = `/api/calls/${encodeURIComponent(a.key)}`;
  return h(
    "div",
    { class: "flagbox", "data-approval": a.key },
    h("div", {}, h("strong", {}, "Waiting for approval: "), what),
    approvalWarning(args.value, clipped),
    reason,
    h(
      "div",
      { class: "actions" },
      h("button", {
        class: "primary",
        "data-action": "approve",
        disabled: clipped > 0,
        onclick: () => act(`${url}/approve`, {}, `${a.key} approved`),
      }, "approve these arguments"),
      h("button", {
        class: "danger",
        "data-action": "deny",
        onclick: () => act(`${url}/deny`, { reason: reason.value }, `${a.key} denied`),
      }, "deny"),
    ),
  );
}

function flagBox(call, readOnly) {
  const known = !("value" in call.error) || call.error.value !== null;
  const intro = [
    h("strong", {}, "Flagged: "),
    h("code", {}, call.tool),
    " ",
    valueView(call.args, "call.args", call.seq, true),
    h("div", {}, known ? valueView(call.error, "call.error", call.seq, false) : "its outcome is unknown"),
  ];
  if (readOnly) return h("div", { class: "flagbox" }, intro, h("div", {}, "This page is read-only."));
  const result = h("textarea", {
    placeholder: 'the remote\'s answer as JSON, e.g. "i-0000001"',
    "data-resolve-input": call.key,
    onfocus: () => (busy = true),
  });
  const url = `/api/calls/${encodeURIComponent(call.key)}/resolve`;
  return h(
    "div",
    { class: "flagbox", "data-flagged": call.key },
    h("div", {}, intro, "Check the remote for this call, then:"),
    result,
    h(
      "div",
      { class: "actions" },
      h("button", {
        class: "primary",
        "data-action": "resolve",
        onclick: () => {
          let value;
          try {
            value = JSON.parse(result.value);
          } catch {
            return toast("The result must be JSON", true);
          }
          act(url, { action: "result", result: value }, `${call.key} resolved`);
        },
      }, "it happened: record this result"),
      h("button", {
        "data-action": "retry",
        onclick: () => act(url, { action: "retry" }, `${call.key} will be sent again`),
      }, "send it again"),
      h("button", {
        class: "danger",
        "data-action": "fail",
        onclick: () =>
          act(url, { action: "fail", reason: "marked failed in the web page" }, `${call.key} marked failed`),
      }, "it did not happen: fail it"),
    ),
  );
}

function rejectionsView(seq, clip) {
  if (!("value" in clip) && !view.whole.has(`decision.rejections@${seq}`)) {
    return h(
      "div",
      { class: "rejected" },
      "refused answers ",
      valueView(clip, "decision.rejections", seq, true),
    );
  }
  const list = view.whole.get(`decision.rejections@${seq}`) ?? clip.value ?? [];
  return list.map((r) =>
    h(
      "div",
      { class: "rejected" },
      `refused answer ${r.code}: `,
      h("span", { class: "value text" }, shown(r.message, { newlines: true })),
    )
  );
}

function stepDetail(step, readOnly) {
  const { seq, decision: d, approval: a, call: c } = step;
  const parts = [];
  if (d) {
    parts.push(
      h(
        "div",
        {},
        h("strong", {}, "decision "),
        badge(d.status),
        " ",
        d.done
          ? ["done: ", valueView(d.message, "decision.message", seq, false)]
          : d.tool
          ? h("span", {}, h("code", {}, d.tool), " ", valueView(d.args, "decision.args", seq, true))
          : "no answer recorded",
        h(
          "span",
          { class: "muted" },
          `  model requests ${d.llmAttempts} · epoch ${d.epoch} · intent ${time(d.intentAt)} · confirmed ${
            time(d.confirmedAt)
          }`,
        ),
        d.inputTokens !== undefined
          ? h("span", { class: "muted" }, ` · tokens ${d.inputTokens}+${d.outputTokens ?? 0}`)
          : "",
      ),
      rejectionsView(seq, d.rejections),
      forkButton(seq, readOnly),
    );
  }
  if (a) {
    parts.push(
      h(
        "div",
        { "data-approval-step": a.key },
        h("strong", {}, "approval "),
        badge(a.status),
        " ",
        h("code", {}, a.tool),
        " ",
        valueView(a.args, "approval.args", seq, true),
        h(
          "span",
          { class: "muted" },
          `  asked ${time(a.requestedAt)} · epoch ${a.epoch}`,
          a.decidedBy !== null
            ? [" · ", `${a.status} by `, h("strong", {}, a.decidedBy), ` at ${time(a.decidedAt)}`]
            : "",
        ),
        "value" in a.reason && a.reason.value === null
          ? ""
          : h("div", { class: "muted" }, "reason: ", valueView(a.reason, "approval.reason", seq, false)),
      ),
    );
  }
  if (c) {
    const error = "value" in c.error && c.error.value === null ? null : c.error;
    parts.push(
      h(
        "div",
        { "data-call": c.key },
        h("strong", {}, "tool "),
        badge(c.status),
        " ",
        h("code", {}, c.tool),
        " key ",
        h("code", {}, c.key),
        c.remote ? [" ", badge(c.remote)] : "",
        h(
          "span",
          { class: "muted" },
          `  attempts ${c.attempts} · epoch ${c.epoch} · intent ${time(c.intentAt)} · confirmed ${
            time(c.confirmedAt)
          }`,
        ),
        c.status === "waiting" || c.polls > 0
          ? h(
            "div",
            { class: "muted", "data-wait": c.key },
            `${
              c.status === "waiting" ? `asked again at ${time(c.checkAt)} · ` : ""
            }asked ${c.polls}x · deadline ${time(c.waitDeadlineAt)}`,
          )
          : "",
        c.failures > 0
          ? h(
            "div",
            { class: "muted", "data-failures": c.key },
            `failed ${c.failures}x since ${time(c.failingSince)}${
              c.status === "intent" && c.checkAt ? ` · sent again under its key at ${time(c.checkAt)}` : ""
            }`,
          )
          : "",
        "value" in c.result && c.result.value === null
          ? ""
          : h("div", {}, "result ", valueView(c.result, "call.result", seq, true)),
        error && c.status !== "flagged"
          ? h("div", { class: "rejected" }, valueView(error, "call.error", seq, false))
          : "",
        c.resolvedBy
          ? h("div", { class: "muted" }, `resolved by ${c.resolvedBy} at ${time(c.resolvedAt)}`)
          : "",
      ),
    );
    if (c.status === "flagged") parts.push(flagBox({ ...c, seq }, readOnly));
  }
  for (const g of step.gaps) parts.push(h("div", { class: "gap" }, `!! ${g}`));
  return h("div", { class: "detail" }, parts);
}

/**
 * "Fork from here" on a decided step of a finished run: a new run whose steps before this one are this
 * run's, deciding anew from it (docs/fork.md); a dry run, so nothing acting on the world is sent. The
 * model's name is asked for (empty: the same); the page then shows the fork.
 */
function forkButton(seq, readOnly) {
  const r = view.last?.run;
  if (readOnly || !r || !CLOSED.includes(r.status)) return "";
  return h("button", {
    class: "small",
    "data-action": "fork",
    "data-fork-seq": seq,
    onclick: async () => {
      const model = prompt(
        `Fork ${r.runId} at step ${seq}: the model's name from there (empty: the same)`,
        "",
      );
      if (model === null) return;
      try {
        const f = await api(`/api/runs/${encodeURIComponent(r.runId)}/fork`, {
          atSeq: seq,
          ...(model.trim() ? { model: model.trim() } : {}),
        });
        toast(`${f.runId}: a fork of ${f.forkedFrom} at step ${f.atSeq}, ${f.dryRun ? "dry" : "live"}`);
        location.href = `/runs/${encodeURIComponent(f.runId)}`;
      } catch (err) {
        toast(err.message, true);
      }
    },
  }, "fork from here");
}

/** One step's row of the grid: its number, a cell per lane, and its detail (one node, `display: contents`). */
function stepView(step, t) {
  const lanes = view.lanes.length ? view.lanes : [{ first: 0 }];
  return h(
    "div",
    { class: "step", "data-step": step.seq },
    h("div", { class: "seq", "data-seq": step.seq }, step.seq),
    lanes.map((l) =>
      h(
        "div",
        { class: "cell", "data-lane": l.first },
        step.events.filter((ev) => laneOf(ev.epoch) === l.first).map(eventView),
      )
    ),
    stepDetail(step, t.readOnly),
  );
}

// ---- lanes: why each worker epoch began ----------------------------------

/** The most lanes drawn (as the server's MAX_LANES); older epochs fold into the first lane shown. */
const MAX_LANES = 8;

/**
 * Why epoch `ev.epoch` began, from the first thing it wrote (`ev`, of step `s`; `prev` the step before):
 * a person's answer to an approval, a child run that ended, a remote's job asked about again, a
 * conversation's next message, or (nothing of those) a crash or a lost lease.
 */
function reasonOf(s, ev, prev, childKeys, t) {
  const call = s.call;
  if (ev.kind === "tool" && call && call.attempts <= 1) {
    const a = s.approval;
    if (a && a.decidedBy !== null && a.epoch < ev.epoch) return `${a.status} by ${a.decidedBy}`;
    if (childKeys.has(call.key)) return "woken by its child";
    if (call.polls > 0) return "woken to ask its remote";
  }
  if (
    ev.kind === "decision" && t.conversation && prev && prev.seq === s.seq - 1 && prev.decision?.done &&
    s.decision?.llmAttempts === 1
  ) return "next message";
  return "crash or lease lost";
}

/**
 * The lanes: each epoch's reason (from the steps held; unknown for an epoch that began before them), a
 * conversation's next message in the lane of the epoch before it (a turn is not a lane), the last
 * MAX_LANES of them. Sets view.lanes ([{first, last, reason, messages}]) and view.laneOf (epoch → lane).
 */
function planLanes(t) {
  const steps = [...view.steps.values()].sort((a, b) => a.seq - b.seq);
  const childKeys = new Set((t.children ?? []).map((c) => c.key));
  const whole = steps.length > 0 && steps[0].seq === t.range.minSeq;
  const reasons = new Map();
  steps.forEach((s, i) => {
    for (const ev of s.events) {
      if (reasons.has(ev.epoch)) continue;
      // The first epoch held began before the steps held when they do not start at the run's first.
      reasons.set(
        ev.epoch,
        reasons.size === 0 ? (whole ? "started" : null) : reasonOf(s, ev, steps[i - 1], childKeys, t),
      );
    }
  });
  let lanes = [];
  for (let e = 1; e <= t.run.epoch; e++) {
    const reason = reasons.get(e) ?? null;
    const lane = lanes.at(-1);
    if (lane && reason === "next message") {
      lane.last = e;
      lane.messages++;
    } else lanes.push({ first: e, last: e, reason, messages: 0 });
  }
  if (lanes.length > MAX_LANES) {
    const folded = lanes.slice(0, lanes.length - MAX_LANES + 1);
    lanes = [
      { first: folded[0].first, last: folded.at(-1).last, reason: null, folded: folded.length, messages: 0 },
      ...lanes.slice(lanes.length - MAX_LANES + 1),
    ];
  }
  view.lanes = lanes;
  view.laneOf = new Map();
  for (const l of lanes) for (let e = l.first; e <= l.last; e++) view.laneOf.set(e, l.first);
}

function laneOf(epoch) {
  return view.laneOf.get(epoch) ?? view.lanes[0]?.first ?? 0;
}

/** A lane's head: its epochs, why it began, its next messages, and the owner of the current epoch. */
function laneHead(l, t) {
  const epochs = l.first === l.last ? `epoch ${l.first}` : `epochs ${l.first}–${l.last}`;
  const parts = [epochs];
  if (l.folded) parts.push("earlier");
  if (l.reason) parts.push(l.reason);
  if (l.messages) parts.push(`${l.messages} next message${l.messages === 1 ? "" : "s"}`);
  if (l.last === t.run.epoch) parts.push(t.run.owner ?? "-");
  return parts.join(" · ");
}

function drawCard() {
  const t = view.last;
  const r = t.run;
  const closed = CLOSED.includes(r.status);
  const buttons = t.readOnly ? h("div", { class: "actions muted" }, "read-only") : h(
    "div",
    { class: "actions" },
    h("button", {
      class: "danger",
      "data-action": "cancel",
      disabled: closed,
      onclick: () =>
        confirm(`Cancel run ${display.displayText(r.runId)}?`) &&
        act(`/api/runs/${encodeURIComponent(r.runId)}/cancel`, {}, `${r.runId} cancelled`),
    }, "cancel run"),
    h("button", {
      "data-action": "reopen",
      disabled: !(r.status === "failed" || r.status === "cancelled"),
      onclick: () => act(`/api/runs/${encodeURIComponent(r.runId)}/reopen`, {}, `${r.runId} reopened`),
    }, "reopen run"),
  );
  const input = "value" in r.input && typeof r.input.value === "string"
    ? valueView(r.input, "input", null, false)
    : valueView(r.input, "input", null, true);
  const hasOutput = !("value" in r.output) || r.output.value !== null;
  const hasError = !("value" in r.error) || r.error.value !== null;
  const card = h(
    "div",
    { class: "card", id: "run-card" },
    h("h2", { style: "margin-top:0" }, r.runId, " ", h("span", { id: "run-status" }, badge(r.status))),
    h(
      "dl",
      { class: "kv" },
      h("dt", {}, "agent"),
      h("dd", {}, r.agent),
      t.version
        ? [
          h("dt", {}, "version"),
          h(
            "dd",
            { id: "run-version", class: "mono" },
            `${t.version.current ?? "- (not started)"}`,
            h(
              "span",
              { class: "muted" },
              `${
                t.version.current ? (t.version.mayMove ? " · moves to newer versions" : " · stays on it") : ""
              }${
                t.version.movedFrom
                  ? ` · moved from ${t.version.movedFrom} at ${time(t.version.movedAt)}`
                  : ""
              }${t.version.moveTo ? ` · to move to ${t.version.moveTo} at its next decision` : ""}${
                t.version.moveRefused ? ` · ${t.version.moveRefused} could not carry it` : ""
              }`,
            ),
            t.version.waitingFor ? h("div", { class: "rejected" }, `waiting: ${t.version.waitingFor}`) : "",
          ),
        ]
        : "",
      h("dt", {}, "input"),
      h("dd", {}, input),
      hasOutput
        ? [h("dt", {}, "output"), h("dd", { id: "run-output" }, valueView(r.output, "output", null, false))]
        : "",
      hasError
        ? [h("dt", {}, "error"), h("dd", { class: "rejected" }, valueView(r.error, "error", null, false))]
        : "",
      t.fork
        ? [
          h("dt", {}, "fork"),
          h(
            "dd",
            { id: "run-fork" },
            t.fork.from
              ? [
                "of ",
                h("a", { href: `/runs/${encodeURIComponent(t.fork.from)}` }, t.fork.from),
                ` at step ${t.fork.atSeq}`,
              ]
              : "no original",
            h(
              "span",
              { class: "muted" },
              t.fork.dryRun ? " · dry run: nothing acting on the world is sent" : " · live",
            ),
            t.fork.evalId
              ? [
                " · case of ",
                h("a", { href: `/evals/${encodeURIComponent(t.fork.evalId)}` }, `eval ${t.fork.evalId}`),
              ]
              : "",
          ),
        ]
        : "",
      r.parentRunId
        ? [
          h("dt", {}, "parent"),
          h(
            "dd",
            { id: "run-parent" },
            h("a", { href: `/runs/${encodeURIComponent(r.parentRunId)}` }, r.parentRunId),
            h("span", { class: "muted" }, ` (call ${r.parentKey ?? "-"})`),
          ),
        ]
        : "",
      (t.children ?? []).length
        ? [
          h("dt", {}, "children"),
          h(
            "dd",
            { id: "run-children" },
            t.children.map((ch) =>
              h(
                "div",
                { "data-child": ch.runId },
                h("a", { href: `/runs/${encodeURIComponent(ch.runId)}` }, ch.runId),
                " ",
                badge(ch.status),
                h("span", { class: "muted" }, ` ${ch.agent} · call ${ch.key ?? "-"}`),
              )
            ),
          ),
        ]
        : "",
      r.status === "waiting"
        ? [
          h("dt", {}, "waits"),
          h(
            "dd",
            { id: "run-waits" },
            t.conversation?.idle
              ? `for the next message, until ${time(r.wakeAt)}`
              : r.wakeAt
              ? `until ${time(r.wakeAt)}: on its calls' remotes, or to ask again after a failure (see error)`
              : "for a person",
          ),
        ]
        : "",
      h("dt", {}, "epoch · owner"),
      h("dd", {}, `${r.epoch} · ${r.owner ?? "-"}`),
      h("dt", {}, "created · updated"),
      h("dd", {}, `${time(r.createdAt)} · ${time(r.updatedAt)}`),
      h("dt", {}, "totals"),
      h(
        "dd",
        { id: "totals" },
        `${t.totals.toolCalls} tool calls · ${t.totals.llmCalls} model calls · tokens ${t.totals.inputTokens}+${t.totals.outputTokens}`,
      ),
    ),
    buttons,
    ...(t.approvals ?? []).map((a) => approvalBox(a, t.readOnly)),
  );
  document.getElementById("run-card").replaceWith(card);
}

// ---- a conversation as a conversation ----------------------------------------

// The next message being written: its id is kept for a send that failed, so sending the
// same text again is the same message (the server takes a messageId once).
let draft = null; // { runId, text, messageId }

/** One line for a value that may have arrived clipped: JSON for a value, its head for a clipped one. */
function short(clip, max = 160) {
  const text = "value" in clip ? JSON.stringify(clip.value) ?? "null" : `${clip.head}…`;
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** A tool call between two messages: what was called with what, and how it ended. */
function chatCall(step) {
  const c = step.call;
  const outcome = c.status === "confirmed"
    ? short(c.result)
    : c.error && !("value" in c.error && c.error.value === null)
    ? short(c.error)
    : "";
  return h(
    "div",
    { class: `chat-call ${c.status}`, "data-call": c.key, "data-step": step.seq },
    h("span", { class: "muted" }, `step ${step.seq} · `),
    h("span", { class: "mono" }, `${c.tool}(${short(c.args)})`),
    " ",
    badge(c.status),
    outcome ? [" → ", h("span", { class: "mono" }, outcome)] : "",
  );
}

/**
 * The conversation's messages (the last ones the run's JSON carries), each
 * followed by the tool calls made for it (from the steps the page holds) and
 * its answer. Every text goes through h(): shown as text, escapes marked.
 */
function drawChat() {
  const t = view.last;
  const c = t.conversation;
  const log = document.getElementById("chat-log");
  if (!log || !c) return;
  const steps = [...view.steps.values()].filter((s) => s.call).sort((a, b) => a.seq - b.seq);
  let after = -1; // the answer step of the message before
  const turns = c.turns.map((m) => {
    const upTo = m.answerSeq ?? Infinity;
    const calls = steps.filter((s) => s.seq > after && s.seq < upTo);
    if (m.answerSeq !== null) after = m.answerSeq;
    return h(
      "div",
      { class: "chat-turn", "data-message": m.seq },
      h(
        "div",
        { class: "bubble user" },
        h(
          "div",
          { class: "muted" },
          `message ${m.seq}${m.messageId === null ? " (the goal)" : ""} · ${time(m.sentAt)}`,
        ),
        h("div", { class: "message" }, m.text),
      ),
      calls.map(chatCall),
      m.answer === null ? "" : h(
        "div",
        { class: "bubble agent", "data-answer": m.answerSeq },
        h("div", { class: "muted" }, `answer · step ${m.answerSeq} · ${time(m.answeredAt)}`),
        h("div", { class: "answer" }, m.answer),
      ),
    );
  });
  log.replaceChildren(
    ...(c.from > 0
      ? [h("div", { class: "muted" }, `(the last ${c.turns.length} of ${c.messages} messages)`)]
      : []),
    ...turns,
  );
  document.getElementById("chat-state").textContent = `${c.messages} message${c.messages === 1 ? "" : "s"}${
    c.ended
      ? " · closed"
      : c.idle
      ? " · waiting for the next"
      : CLOSED.includes(t.run.status)
      ? ""
      : " · working"
  }`;
  const open = !c.ended && !CLOSED.includes(t.run.status) && !t.readOnly;
  const form = document.getElementById("chat-form");
  form.hidden = !open;
  document.getElementById("chat-closed").textContent = open
    ? ""
    : t.readOnly
    ? "read-only: this page cannot send"
    : "the conversation is closed";
}

/** The chat panel, drawn once per page: the log is redrawn with each answer, the box is kept. */
function chatShell(runId) {
  const input = h("textarea", {
    id: "chat-input",
    rows: 3,
    placeholder: "the next message (Enter sends, Shift+Enter a new line)",
    onkeydown: (e) => {
      if (e.key === "Enter" && !e.shiftKey) {
        e.preventDefault();
        form.requestSubmit();
      }
    },
  });
  const button = h("button", { id: "chat-send", type: "submit", "data-action": "send" }, "send");
  const form = h(
    "form",
    {
      id: "chat-form",
      class: "chat-form",
      onsubmit: (e) => {
        e.preventDefault();
        sendMessage(runId, input, button);
      },
    },
    input,
    button,
  );
  return h(
    "section",
    { class: "chat", id: "chat" },
    h("h3", {}, "Conversation ", h("span", { class: "muted", id: "chat-state" })),
    h("div", { id: "chat-log", class: "chat-log" }),
    h("div", { id: "live-answer", class: "live-answer", hidden: true }),
    form,
    h("p", { class: "muted", id: "chat-closed" }),
  );
}

async function sendMessage(runId, input, button) {
  const text = input.value;
  if (text.trim() === "") return;
  // The same text sent again after a failure keeps its id: one message, however many tries.
  if (!draft || draft.runId !== runId || draft.text !== text) {
    draft = { runId, text, messageId: crypto.randomUUID() };
  }
  button.disabled = true;
  try {
    // The AI SDK's default chat transport's request: the answer comes back as its UI message stream.
    const message = { id: draft.messageId, role: "user", parts: [{ type: "text", text }] };
    await openChat(runId, (signal) =>
      fetch("/api/chat", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ id: runId, messages: [message], trigger: "submit-message" }),
        signal,
      }));
    draft = null;
    input.value = "";
    toast("message sent");
  } catch (err) {
    toast(err.message, true);
  } finally {
    button.disabled = false;
  }
  await refresh();
}

/** Draws the steps in `seqs` (all held when omitted), in order; a new set of lanes redraws every step. */
function drawSteps(seqs) {
  const t = view.last;
  planLanes(t);
  const lanesKey = view.lanes.map((l) => laneHead(l, t)).join(",");
  let grid = document.getElementById("timeline");
  if (lanesKey !== view.lanesKey || !grid.classList.contains("timeline")) {
    view.lanesKey = lanesKey;
    const cols = `48px repeat(${Math.max(1, view.lanes.length)}, minmax(200px, 1fr))`;
    grid = h(
      "div",
      { class: "timeline", id: "timeline", style: `grid-template-columns:${cols}` },
      h(
        "div",
        { class: "step heads" },
        h("div", { class: "head" }, "step"),
        view.lanes.map((l) =>
          h(
            "div",
            {
              class: `head lane-head${l.last === t.run.epoch ? " current" : ""}`,
              "data-epoch": l.first,
              "data-reason": l.reason ?? "",
            },
            laneHead(l, t),
          )
        ),
        view.lanes.length === 0 ? h("div", { class: "head" }, "not claimed yet") : "",
      ),
    );
    document.getElementById("timeline").replaceWith(grid);
    seqs = undefined;
  }
  const order = [...view.steps.keys()].sort((a, b) => a - b);
  for (const seq of seqs ?? order) {
    const node = stepView(view.steps.get(seq), t);
    const old = grid.querySelector(`:scope > [data-step="${seq}"]`);
    if (old) {
      old.replaceWith(node);
      continue;
    }
    // Before the first step drawn with a higher number, else at the end.
    const after = [...grid.querySelectorAll(":scope > [data-step]")].find((el) =>
      Number(el.dataset.step) > seq
    );
    grid.insertBefore(node, after ?? null);
  }
  const empty = document.getElementById("no-steps");
  empty.hidden = view.steps.size > 0;
  grid.hidden = view.steps.size === 0;
  drawEarlier();
}

function drawEarlier() {
  const t = view.last;
  const min = t.range.minSeq;
  const missing = view.lo === null || min === null ? 0 : view.lo - min;
  const box = document.getElementById("earlier");
  box.replaceChildren(
    missing > 0
      ? h("button", {
        "data-action": "earlier",
        onclick: () => loadEarlier(),
      }, `show ${Math.min(missing, 50)} earlier steps`)
      : "",
    missing > 0 ? h("span", { class: "muted" }, ` ${missing} earlier steps not shown`) : "",
  );
}

/** Takes a timeline answer's steps into the view; returns their numbers. */
function take(t) {
  for (const s of t.steps) view.steps.set(s.seq, s);
  const seqs = t.steps.map((s) => s.seq);
  if (seqs.length) {
    view.lo = view.lo === null ? seqs[0] : Math.min(view.lo, seqs[0]);
    view.hi = view.hi === null ? seqs.at(-1) : Math.max(view.hi, seqs.at(-1));
  }
  return seqs;
}

async function loadEarlier() {
  const q = new URLSearchParams({ before: String(view.lo), limit: "50" });
  const t = await api(`/api/runs/${encodeURIComponent(view.runId)}?${q}`);
  view.last = { ...view.last, range: t.range };
  drawSteps(take(t));
}

/** Draws a run's page, or what changed on it since the last call; true while the run can still change. */
async function drawRun(runId) {
  if (busy) return true;
  const first = view.runId !== runId || view.last === null;
  if (first) resetView(runId);
  // The last step held may still change (its call settle, its approval be decided): ask from it on.
  const q = first || view.hi === null ? `limit=50` : `from=${view.hi}`;
  const t = await api(`/api/runs/${encodeURIComponent(runId)}?${q}`);
  const shrunk = view.hi !== null && (t.range.maxSeq === null || t.range.maxSeq < view.hi);
  const jumped = !first && t.steps.length > 0 && view.hi !== null && t.steps[0].seq > view.hi;
  if (shrunk || jumped) {
    // The run was pruned and made again, or more steps were written than one answer holds: start over.
    resetView(runId);
    take(t);
  }
  view.last = t;
  if (first || shrunk || jumped) {
    const timeline = [
      h("h3", {}, "Timeline ", h("span", { class: "muted" }, "(one lane per worker epoch)")),
      h("div", { id: "earlier", class: "earlier" }),
      h("p", { class: "muted", id: "no-steps" }, "No steps yet."),
      h("div", { class: "scroll" }, h("div", { id: "timeline" })),
    ];
    main.replaceChildren(
      h("p", {}, h("a", { href: "/" }, "← all runs")),
      h("div", { id: "run-card" }),
      // A conversation reads as one, beside its timeline; any other run shows its answer above it.
      ...(t.conversation
        ? [h("div", { class: "beside" }, chatShell(runId), h("section", { class: "steps" }, timeline))]
        : [h("div", { id: "live-answer", class: "live-answer", hidden: true }), ...timeline]),
    );
    if (first) take(t);
    drawCard();
    drawSteps();
  } else {
    drawCard();
    drawSteps(take(t));
  }
  drawChat();
  if (t.conversation) followChat(runId, t);
  else followAnswer(runId, CLOSED.includes(t.run.status));
  return !CLOSED.includes(t.run.status);
}

// ---- the answer as it is written (server-sent events, /api/runs/:id/stream) ----

let answer = null; // { runId, source, seq, attempt, start, text, label }

/** Shows the text of the answer being written, as the server streams it; drawn with textContent only. */
function drawAnswer() {
  const box = document.getElementById("live-answer");
  if (!box || !answer) return;
  // In a conversation an answer the log already shows is not shown twice.
  const logged = (view.last?.conversation?.turns ?? []).some((m) =>
    m.answerSeq !== null && m.answerSeq === answer.seq
  );
  box.hidden = logged || (answer.text === "" && answer.label === "");
  box.replaceChildren(
    h("div", { class: "muted" }, answer.label),
    h(
      "pre",
      { class: "answer-text", "data-seq": answer.seq ?? "" },
      answer.start > 0 ? "…" : "",
      answer.text,
    ),
  );
}

/** Follows a run's stream while its page is open and the run can still change. */
function followAnswer(runId, closed) {
  chat?.abort.abort();
  chat = null;
  if (answer && answer.runId === runId) {
    drawAnswer();
    return;
  }
  answer?.source.close();
  answer = null;
  if (closed) return;
  const source = new EventSource(`/api/runs/${encodeURIComponent(runId)}/stream`);
  answer = { runId, source, seq: null, attempt: null, start: 0, text: "", label: "" };
  const on = (type, fn) =>
    source.addEventListener(type, (m) => {
      if (answer?.source !== source) return;
      fn(JSON.parse(m.data));
      drawAnswer();
    });
  on("delta", (e) => {
    // A new step or attempt starts the text afresh; a page that joined mid-answer shows where it joined.
    if (answer.seq !== e.seq || answer.attempt !== e.attempt) {
      Object.assign(answer, { seq: e.seq, attempt: e.attempt, start: e.offset, text: "" });
    }
    const at = e.offset - answer.start;
    if (at >= 0 && at <= answer.text.length) answer.text = answer.text.slice(0, at) + e.text;
    answer.label = `writing · step ${e.seq} · attempt ${e.attempt} · epoch ${e.epoch}`;
  });
  on("reset", (e) => {
    Object.assign(answer, { seq: e.seq, attempt: null, start: 0, text: "" });
    const why = e.reason === "takeover"
      ? "the run was taken over"
      : e.reason === "lagged"
      ? "this page fell behind and skipped text"
      : "the model was asked again";
    answer.label = `step ${e.seq}: ${why}; ${e.dropped} characters dropped`;
  });
  on("answer", (e) => {
    Object.assign(answer, { seq: e.seq, attempt: null, start: 0, text: e.text });
    answer.label = `answer · step ${e.seq}${
      e.clipped ? ` · first ${e.text.length} of ${e.chars} characters` : ""
    }`;
  });
  on("tool_calls", (e) => {
    if (answer.seq === e.seq) Object.assign(answer, { text: "", label: "" });
  });
  // The stream ends with the run: the browser would otherwise connect again.
  source.addEventListener("end", () => source.close());
}

// ---- a conversation's answer as it is written: the AI SDK's UI message stream (/api/chat) ----

// The stream being read: { runId, abort, active, turn, text, label }. The text shown is the current
// step's since its last reset-step, as the `ai` package's own reader keeps it.
let chat = null;

/** Shows the answer being written, from the stream's chunks; drawn with textContent only. */
function drawChatAnswer() {
  const box = document.getElementById("live-answer");
  if (!box || !chat) return;
  box.hidden = !chat.active || (chat.text === "" && chat.label === "");
  box.replaceChildren(
    h("div", { class: "muted" }, chat.label),
    h("pre", { class: "answer-text" }, chat.text),
  );
}

/** One chunk of the UI message stream into the view. */
function onChunk(c, k) {
  if (k.type === "start-step" || k.type === "reset-step") {
    c.text = "";
    c.label = k.type === "reset-step"
      ? "the model was asked again (a retry, or another worker took the run over): its text starts again"
      : `working on message ${c.turn}`;
  } else if (k.type === "text-delta") {
    c.text += k.delta;
    c.label = `writing the answer to message ${c.turn}`;
  } else if (k.type === "tool-input-available") {
    c.label = `calling ${k.toolName}`;
  } else if (k.type === "tool-approval-request") {
    c.label = `${k.toolCallId} waits for a person's approval`;
  } else if (k.type === "error") {
    c.label = k.errorText;
  } else if (k.type === "finish") {
    c.active = false;
  }
}

/** Reads a UI message stream response (`data: <json>` events, `data: [DONE]` last) into `c`. */
async function readChat(c, res) {
  c.turn = Number(res.headers.get("x-chat-turn") ?? 0);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += value;
      for (let at = buf.indexOf("\n\n"); at >= 0; at = buf.indexOf("\n\n")) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        if (chat !== c) return;
        onChunk(c, JSON.parse(event.slice(6)));
        drawChatAnswer();
      }
    }
  } catch (err) {
    if (err.name !== "AbortError") c.label = `the stream broke off: ${err.message}`;
  } finally {
    c.active = false;
    if (chat === c) {
      drawChatAnswer();
      refresh();
    }
  }
}

/** Opens a chat stream (a POST's answer, or a resume); throws the server's refusal. */
async function openChat(runId, request) {
  chat?.abort.abort();
  const c = { runId, abort: new AbortController(), active: true, turn: 0, text: "", label: "" };
  chat = c;
  const res = await request(c.abort.signal);
  if (res.status === 204) {
    c.active = false;
    return;
  }
  if (!res.ok) {
    c.active = false;
    const data = await res.json().catch(() => ({ code: "UI_BAD_ANSWER", message: `HTTP ${res.status}` }));
    throw Object.assign(new Error(`${data.code}: ${data.message}`), data);
  }
  readChat(c, res);
}

/** Follows a conversation's answer while it works: resumes its stream (204: nothing is being written). */
function followChat(runId, t) {
  answer?.source.close();
  answer = null;
  if (chat && chat.runId !== runId) {
    chat.abort.abort();
    chat = null;
  }
  const c = t.conversation;
  const working = !c.idle && !c.ended && !CLOSED.includes(t.run.status);
  if (working && !chat?.active) {
    openChat(runId, (signal) => fetch(`/api/chat/${encodeURIComponent(runId)}/stream`, { signal }))
      .catch((err) => toast(err.message, true));
  }
  drawChatAnswer();
}

// ---- an evaluation ---------------------------------------------------------

/** An evaluation's case runs: a line per variant, then each case run, linked. Polled until none is open. */
async function drawEval(id) {
  const t = await api(`/api/evals/${encodeURIComponent(id)}`);
  const cols = ["variant", "cases", "done", "failed", "blocked", "open", "tokens", "model calls"];
  main.replaceChildren(
    h("p", {}, h("a", { href: "/" }, "← all runs")),
    h("h2", {}, `eval ${t.id}`),
    h(
      "table",
      { id: "eval-variants" },
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        t.variants.map((v) =>
          h(
            "tr",
            { "data-variant": v.variant },
            [v.variant, v.cases, v.done, v.failed, v.blocked, v.open, v.tokens, v.llmCalls].map((x) =>
              h("td", {}, String(x))
            ),
          )
        ),
      ),
    ),
    h(
      "table",
      { id: "eval-cases" },
      h(
        "thead",
        {},
        h("tr", {}, ["case run", "variant", "status", "forked from", "output"].map((c) => h("th", {}, c))),
      ),
      h(
        "tbody",
        {},
        t.cases.map((c) =>
          h(
            "tr",
            { "data-case": c.runId },
            h("td", {}, h("a", { href: `/runs/${encodeURIComponent(c.runId)}` }, c.runId)),
            h("td", {}, c.variant),
            h("td", {}, badge(c.status)),
            h(
              "td",
              {},
              c.forkedFrom
                ? h("a", { href: `/runs/${encodeURIComponent(c.forkedFrom)}` }, c.forkedFrom)
                : "-",
            ),
            h("td", { class: "mono" }, c.output ?? "-"),
          )
        ),
      ),
    ),
  );
  return t.variants.some((v) => v.open > 0);
}

// ---- routing and polling -------------------------------------------------

async function refresh() {
  clearTimeout(timer);
  let again = true;
  try {
    const m = /^\/runs\/(.+)$/.exec(location.pathname);
    const e = /^\/evals\/(.+)$/.exec(location.pathname);
    again = m
      ? await drawRun(decodeURIComponent(m[1]))
      : e
      ? await drawEval(decodeURIComponent(e[1]))
      : await drawList();
    live.classList.remove("stale");
    live.textContent = again
      ? `live · ${new Date().toLocaleTimeString()}`
      : "finished · not updating (reload to check again)";
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded ?? 0) + 1);
  } catch (err) {
    live.classList.add("stale");
    live.textContent = "not updating";
    if (!main.dataset.shown) main.replaceChildren(h("p", { class: "rejected" }, err.message));
  }
  main.dataset.shown = "1";
  // A finished run writes nothing more: stop asking (an action on the page starts again).
  if (again) timer = setTimeout(refresh, POLL_MS);
}

refresh();
