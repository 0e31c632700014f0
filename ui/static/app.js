// The page: plain JavaScript, no build step. Everything is drawn from the
// JSON API with textContent (never innerHTML), and redrawn every POLL_MS.
"use strict";

const POLL_MS = 1500;
const main = document.getElementById("main");
const live = document.getElementById("live");
let timer = 0;
let busy = false; // a person is typing in a resolve box: do not redraw under them

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
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
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
const json = (v) => JSON.stringify(v);
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
  const data = await api(`/api/runs?${q}`);
  const all = Object.values(data.counts).reduce((a, b) => a + b, 0);
  const chips = h(
    "div",
    { class: "chips", id: "counts" },
    h(
      "button",
      { class: `chip${s.status ? "" : " on"}`, onclick: () => goList({ status: "" }) },
      `all ${all}`,
    ),
    ["pending", "running", "waiting", "blocked", "done", "failed", "cancelled"].map((st) =>
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
      h("td", {}, h("a", { href: `/runs/${encodeURIComponent(r.runId)}` }, r.runId)),
      h("td", {}, badge(r.status), r.flagged ? h("span", { class: "muted" }, ` ${r.flagged} flagged`) : ""),
      h("td", {}, r.agent),
      h("td", { class: "num" }, r.steps),
      h("td", { class: "num" }, r.llmCalls),
      h("td", { class: "num" }, r.inputTokens + r.outputTokens ? `${r.inputTokens}+${r.outputTokens}` : "-"),
      h("td", { class: "num" }, r.epoch),
      h("td", {}, ago(r.ageMs)),
      h("td", { class: "mono" }, r.owner ?? "-"),
      h("td", {}, r.heartbeatAgeMs === null ? "-" : `${ago(r.heartbeatAgeMs)} ago`),
    )
  );
  const table = h(
    "table",
    { id: "runs" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        [
          "run",
          "status",
          "agent",
          "steps",
          "model calls",
          "tokens in+out",
          "epoch",
          "age",
          "owner",
          "heartbeat",
        ]
          .map((t, i) => h("th", { class: i >= 3 && i <= 6 ? "num" : "" }, t)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.length ? rows : h("tr", {}, h("td", { colspan: 10, class: "muted" }, "No runs match.")),
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
  const focused = document.activeElement?.id;
  main.replaceChildren(
    h("h2", {}, "Runs"),
    chips,
    h("div", { class: "filters" }, search, agent),
    table,
    pager,
  );
  if (focused === "search") search.focus();
}

// ---- one run -------------------------------------------------------------

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

function approvalBox(a, readOnly) {
  const what = `${a.tool} ${json(a.args)}`;
  if (readOnly) {
    return h("div", { class: "flagbox" }, `Waiting for approval: ${what}. This page is read-only.`);
  }
  const key = encodeURIComponent(a.key);
  const reason = h("textarea", {
    placeholder: "why not (shown to the model if you deny)",
    onfocus: () => (busy = true),
  });
  return h(
    "div",
    { class: "flagbox", "data-approval": a.key },
    h("div", {}, h("strong", {}, "Waiting for approval: "), h("span", { class: "mono" }, what)),
    reason,
    h(
      "div",
      { class: "actions" },
      h("button", {
        class: "primary",
        "data-action": "approve",
        onclick: () => act(`/api/calls/${key}/approve`, {}, `${a.key} approved`),
      }, "approve these arguments"),
      h("button", {
        class: "danger",
        "data-action": "deny",
        onclick: () => act(`/api/calls/${key}/deny`, { reason: reason.value }, `${a.key} denied`),
      }, "deny"),
    ),
  );
}

function flagBox(call, readOnly) {
  if (readOnly) {
    return h("div", { class: "flagbox" }, "Flagged: its outcome is unknown. This page is read-only.");
  }
  const result = h("textarea", {
    placeholder: 'the remote\'s answer as JSON, e.g. "i-0000001"',
    "data-resolve-input": call.key,
    onfocus: () => (busy = true),
  });
  const key = encodeURIComponent(call.key);
  return h(
    "div",
    { class: "flagbox", "data-flagged": call.key },
    h(
      "div",
      {},
      h("strong", {}, "Flagged: "),
      call.error ?? "its outcome is unknown",
      ". Check the remote, then:",
    ),
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
          act(`/api/calls/${key}/resolve`, { action: "result", result: value }, `${call.key} resolved`);
        },
      }, "it happened: record this result"),
      h("button", {
        "data-action": "retry",
        onclick: () =>
          act(`/api/calls/${key}/resolve`, { action: "retry" }, `${call.key} will be sent again`),
      }, "send it again"),
      h("button", {
        class: "danger",
        "data-action": "fail",
        onclick: () =>
          act(
            `/api/calls/${key}/resolve`,
            { action: "fail", reason: "marked failed in the web page" },
            `${call.key} marked failed`,
          ),
      }, "it did not happen: fail it"),
    ),
  );
}

function stepDetail(step, readOnly) {
  const d = step.decision;
  const c = step.call;
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
          ? `done: ${d.message ?? ""}`
          : d.tool
          ? h("span", {}, h("code", {}, d.tool), " ", h("code", {}, json(d.args)))
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
    );
    for (const r of d.rejections) {
      parts.push(h("div", { class: "rejected" }, `refused answer ${r.code}: ${r.message}`));
    }
  }
  if (c) {
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
        c.result !== null ? h("div", {}, "result ", h("code", {}, json(c.result))) : "",
        c.error && c.status !== "flagged" ? h("div", { class: "rejected" }, c.error) : "",
        c.resolvedBy ? h("div", { class: "muted" }, `resolved by ${c.resolvedBy}`) : "",
      ),
    );
    if (c.status === "flagged") parts.push(flagBox(c, readOnly));
  }
  for (const g of step.gaps) parts.push(h("div", { class: "gap" }, `!! ${g}`));
  return h("div", { class: "detail" }, parts);
}

async function drawRun(runId) {
  if (busy) return;
  const t = await api(`/api/runs/${encodeURIComponent(runId)}`);
  const r = t.run;
  const closed = ["done", "failed", "cancelled"].includes(r.status);
  const buttons = t.readOnly ? h("div", { class: "actions muted" }, "read-only") : h(
    "div",
    { class: "actions" },
    h("button", {
      class: "danger",
      "data-action": "cancel",
      disabled: closed,
      onclick: () =>
        confirm(`Cancel run ${r.runId}?`) &&
        act(`/api/runs/${encodeURIComponent(r.runId)}/cancel`, {}, `${r.runId} cancelled`),
    }, "cancel run"),
    h("button", {
      "data-action": "reopen",
      disabled: !(r.status === "failed" || r.status === "cancelled"),
      onclick: () => act(`/api/runs/${encodeURIComponent(r.runId)}/reopen`, {}, `${r.runId} reopened`),
    }, "reopen run"),
  );
  const info = h(
    "div",
    { class: "card" },
    h("h2", { style: "margin-top:0" }, r.runId, " ", h("span", { id: "run-status" }, badge(r.status))),
    h(
      "dl",
      { class: "kv" },
      h("dt", {}, "agent"),
      h("dd", {}, r.agent),
      h("dt", {}, "input"),
      h("dd", { class: "mono" }, typeof r.input === "string" ? r.input : json(r.input)),
      r.output !== null ? [h("dt", {}, "output"), h("dd", { id: "run-output" }, r.output)] : "",
      r.error ? [h("dt", {}, "error"), h("dd", { class: "rejected" }, r.error)] : "",
      h("dt", {}, "epoch · owner"),
      h("dd", {}, `${r.epoch} · ${r.owner ?? "-"}`),
      h("dt", {}, "created · updated"),
      h("dd", {}, `${time(r.createdAt)} · ${time(r.updatedAt)}`),
      h("dt", {}, "totals"),
      h(
        "dd",
        { id: "totals" },
        `${t.totals.steps} tool steps · ${t.totals.llmCalls} model calls · tokens ${t.totals.inputTokens}+${t.totals.outputTokens}`,
      ),
    ),
    buttons,
    ...(t.approvals ?? []).map((a) => approvalBox(a, t.readOnly)),
  );
  const cols = `48px repeat(${Math.max(1, t.epochs.length)}, minmax(220px, 1fr))`;
  const grid = h(
    "div",
    { class: "timeline", id: "timeline", style: `grid-template-columns:${cols}` },
    h("div", { class: "head" }, "step"),
    t.epochs.map((e) =>
      h(
        "div",
        { class: `head lane-head${e === r.epoch ? " current" : ""}`, "data-epoch": e },
        `epoch ${e}${e === r.epoch ? ` · ${r.owner ?? "-"}` : e < r.epoch ? " · taken over" : ""}`,
      )
    ),
    t.epochs.length === 0 ? h("div", { class: "head" }, "not claimed yet") : "",
    t.steps.map((s) => [
      h("div", { class: "seq", "data-seq": s.seq }, s.seq),
      (t.epochs.length ? t.epochs : [0]).map((e) =>
        h("div", { class: "cell", "data-lane": e }, (s.lanes[e] ?? []).map(eventView))
      ),
      stepDetail(s, t.readOnly),
    ]),
  );
  main.replaceChildren(
    h("p", {}, h("a", { href: "/" }, "← all runs")),
    info,
    h("h3", {}, "Timeline ", h("span", { class: "muted" }, "(one lane per worker epoch)")),
    t.steps.length ? grid : h("p", { class: "muted" }, "No steps yet."),
  );
}

// ---- routing and polling -------------------------------------------------

async function refresh() {
  clearTimeout(timer);
  try {
    const m = /^\/runs\/(.+)$/.exec(location.pathname);
    if (m) await drawRun(decodeURIComponent(m[1]));
    else await drawList();
    live.classList.remove("stale");
    live.textContent = `live · ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded ?? 0) + 1);
  } catch (err) {
    live.classList.add("stale");
    live.textContent = "not updating";
    if (!main.dataset.shown) main.replaceChildren(h("p", { class: "rejected" }, err.message));
  }
  main.dataset.shown = "1";
  timer = setTimeout(refresh, POLL_MS);
}

refresh();
