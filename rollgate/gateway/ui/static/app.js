// Rollgate trajectory viewer. Vanilla JS, no dependencies. Every string that comes from a
// trajectory (model output, tool output, task rows) is rendered with textContent, never as HTML.
"use strict";

const API = document.body.dataset.apiBase || "";
const TOKEN_KEY = "rollgate.token";
const MAX_RECORDS = 5000; // the list is for browsing; a trainer reads the full NDJSON itself
const OUTCOMES = ["completed", "truncated", "env_error", "model_error", "timeout", "cancelled", "failure"];

const state = { jobs: [], jobId: null, records: [], episodes: {}, truncated: false, loadedJob: null, summary: null,
                report: null };
const $ = (sel) => document.querySelector(sel);

// ---- small DOM helper ------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "data") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const fmt = (x, digits = 3) => (typeof x === "number" ? +x.toFixed(digits) : x ?? "—");
const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));

// ---- the hash is the view: #job=ID&traj=ID&env=&outcome=&rmin=&rmax= -------------------------
function readHash() {
  return Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
}
function writeHash(patch) {
  const h = { ...readHash(), ...patch };
  for (const k of Object.keys(h)) if (h[k] === "" || h[k] == null) delete h[k];
  const next = "#" + new URLSearchParams(h).toString();
  if (next !== location.hash) location.hash = next;
}

// ---- API -------------------------------------------------------------------------------------
function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { authorization: "Bearer " + t } : {};
}

async function apiFetch(path) {
  const res = await fetch(API + path, { headers: authHeaders() });
  if (!res.ok) {
    let msg = res.status + " " + res.statusText;
    try { const body = await res.json(); msg = body.error?.message || msg; } catch (_) { /* not JSON */ }
    if (res.status === 401) msg += " — enter the gateway's API token above";
    throw new Error(path + ": " + msg);
  }
  return res;
}

// Finished jobs per policy version: training reward and evaluation headlines (GET /v1/rollouts/summary).
async function loadSummary() {
  state.summary = await (await apiFetch("/v1/rollouts/summary")).json();
}

// The evaluation report of an eval job; a running job answers 409 and is shown as such.
async function loadReport(job) {
  if (job?.purpose !== "eval") { state.report = null; return; }
  if (state.report?.jobId === job.job_id && state.report.body) return;
  const res = await fetch(API + "/v1/rollouts/" + encodeURIComponent(job.job_id) + "/report", { headers: authHeaders() });
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  state.report = res.ok ? { jobId: job.job_id, body }
                        : { jobId: job.job_id, error: body?.error?.message || res.status + " " + res.statusText };
}

async function loadJobs() {
  const body = await (await apiFetch("/v1/rollouts")).json();
  const jobs = Array.isArray(body) ? body : body.jobs || body.items || [];
  state.jobs = jobs.map((j) => ({ ...j, job_id: j.job_id || j.id }));
}

// Read the NDJSON results as a stream so a large job shows its first records without waiting.
// Lines are {cursor, type: trajectory|episode|failure|heartbeat|end, record?} (rollgate.gateway.stream);
// an episode (a multi-role task) adds one record per role, linked by its episode id (roles.js).
async function loadResults(jobId) {
  const res = await apiFetch("/v1/rollouts/" + encodeURIComponent(jobId) + "/results?limit=" + MAX_RECORDS);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const records = [];
  state.episodes = {};
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    buf += decoder.decode(value || new Uint8Array(), { stream: !done });
    const lines = buf.split("\n");
    buf = done ? "" : lines.pop();
    for (const line of lines) {
      if (!line.trim()) continue;
      const msg = JSON.parse(line);
      if (msg.type === "trajectory" || msg.type === "failure") records.push(normalise(msg.record, records.length));
      else if (msg.type === "episode") addEpisode(msg.record, records);
    }
    if (done) break;
  }
  state.records = records;
  state.truncated = records.length >= MAX_RECORDS;
  state.loadedJob = jobId;
}

// A FailureRecord (a task that never became a trajectory) gets the same list fields.
function normalise(r, index) {
  if (r.trajectory_id) return { ...r, _id: r.trajectory_id, _index: index };
  return { ...r, _failure: true, _id: "failure-" + (r.line ?? index), _index: index, outcome: "failure",
           task: { env: null, task_id: r.task_id } };
}

// ---- rendering: jobs -------------------------------------------------------------------------
function jobProgress(j) {
  const done = j.done ?? j.finished ?? j.completed ?? j.progress?.done;
  const total = j.total ?? j.tasks ?? j.progress?.total;
  return done !== undefined ? (total !== undefined ? done + "/" + total : String(done)) : "";
}

function renderJobs() {
  const tbody = $("#jobs tbody");
  tbody.replaceChildren(...state.jobs.map((j) => el("tr",
    { class: j.job_id === state.jobId ? "selected" : "", data: { job: j.job_id },
      onclick: () => writeHash({ job: j.job_id, traj: "" }) },
    el("td", { class: "mono", title: j.job_id }, j.purpose === "eval" ? el("span", { class: "badge eval" }, "eval") : "",
      j.purpose === "eval" ? " " : "", j.job_id),
    el("td", { title: Object.entries(j.counts || {}).map(([k, v]) => k + ": " + v).join(", ") +
      (typeof j.mean_reward === "number" ? "; mean reward " + fmt(j.mean_reward) : "") }, j.state || j.status || ""),
    el("td", {}, jobProgress(j)))));
  if (!state.jobs.length) tbody.append(el("tr", {}, el("td", { colspan: 3, class: "muted" }, "no jobs yet")));
}

// ---- rendering: trajectory list --------------------------------------------------------------
function filters() {
  const h = readHash();
  return { env: h.env || "", role: h.role || "", outcome: h.outcome || "", rmin: h.rmin ?? "", rmax: h.rmax ?? "" };
}

function matches(r, f) {
  if (f.env && r.task?.env !== f.env) return false;
  if (f.role && r.role !== f.role) return false;
  if (f.outcome && r.outcome !== f.outcome) return false;
  if (f.rmin !== "" && !(typeof r.reward === "number" && r.reward >= +f.rmin)) return false;
  if (f.rmax !== "" && !(typeof r.reward === "number" && r.reward <= +f.rmax)) return false;
  return true;
}

function fillSelect(select, values, current) {
  select.replaceChildren(el("option", { value: "" }, "all"),
    ...values.map((v) => el("option", { value: v, selected: v === current ? "selected" : false }, v)));
  select.value = current;
}

function renderList() {
  const f = filters();
  const envs = [...new Set(state.records.map((r) => r.task?.env).filter(Boolean))].sort();
  fillSelect($("#f-env"), envs, f.env);
  const roles = [...new Set(state.records.map((r) => r.role).filter(Boolean))].sort();
  fillSelect($("#f-role"), roles, f.role);
  $("#f-role-label").hidden = !roles.length;
  fillSelect($("#f-outcome"), OUTCOMES, f.outcome);
  $("#f-rmin").value = f.rmin;
  $("#f-rmax").value = f.rmax;
  const shown = state.records.filter((r) => matches(r, f));
  $("#list-title").replaceChildren("Trajectories of ", el("span", { class: "mono", title: state.jobId }, state.jobId));
  $("#list-summary").textContent = shown.length + " of " + state.records.length + " records" +
    (state.truncated ? " (first " + MAX_RECORDS + " only)" : "");
  const selected = readHash().traj;
  $("#trajectories tbody").replaceChildren(...shown.map((r) => el("tr",
    { class: r._id === selected ? "selected" : "", data: { traj: r._id },
      onclick: () => writeHash({ traj: r._id }) },
    el("td", {}, r._index),
    el("td", { class: "mono", title: r.task?.task_id || "" }, r.task?.task_id || "—"),
    el("td", {}, r.task?.env || "—"),
    el("td", { title: r._episode ? "episode " + r._episode : "" }, r.role || "—"),
    el("td", {}, outcomeBadge(r.outcome)),
    el("td", { class: "num" }, fmt(r.reward)),
    el("td", { class: "num" }, r.turns ? r.turns.length : "—"),
    el("td", { class: "num" }, r.turns ? r.turns.reduce((n, t) => n + t.generation_token_ids.length, 0) : "—"),
    el("td", { class: "num" }, fmt(r.timings?.total_s, 2)))));
}

const outcomeBadge = (o) => el("span", { class: "badge " + (o || "") }, o || "?");

// ---- rendering: one trajectory ---------------------------------------------------------------
function kv(rows) {
  return el("table", { class: "kv" }, rows.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return pretty(content);
  return content.map((c) => (typeof c === "string" ? c : c.text ?? c.refusal ?? pretty(c))).join("");
}

function renderItem(item) {
  const type = item.type || (item.role ? "message" : "unknown");
  if (type === "message") {
    return el("div", { class: "msg " + (item.role || "unknown") },
      el("div", { class: "who" }, item.role || "message"), el("pre", {}, textOf(item.content)));
  }
  if (type === "function_call") {
    let args = item.arguments;
    try { args = pretty(JSON.parse(args)); } catch (_) { /* keep the raw text the model wrote */ }
    return el("div", { class: "msg call" },
      el("div", { class: "who" }, "tool call ", el("b", {}, item.name), el("span", { class: "muted" }, " " + (item.call_id || ""))),
      el("pre", {}, args));
  }
  if (type === "function_call_output") {
    return el("div", { class: "msg output" },
      el("div", { class: "who" }, "tool output ", el("span", { class: "muted" }, item.call_id || "")),
      el("pre", {}, textOf(item.output)));
  }
  if (type === "reasoning") {
    const parts = [...(item.summary || []), ...(item.content || [])];
    return el("div", { class: "msg reasoning" }, el("div", { class: "who" }, "reasoning"), el("pre", {}, textOf(parts)));
  }
  return el("div", { class: "msg unknown" }, el("div", { class: "who" }, type), el("pre", {}, pretty(item)));
}

function renderTurns(turns) {
  if (!turns?.length) return el("p", { class: "muted" }, "no model turns recorded");
  return el("table", { class: "turns" },
    el("thead", {}, el("tr", {}, ["turn", "prompt tokens", "generated tokens", "mean log-prob", "finish", "weights"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, turns.map((t, i) => {
      const lp = t.generation_log_probs || [];
      const mean = lp.length ? lp.reduce((a, b) => a + b, 0) / lp.length : null;
      return el("tr", {}, el("td", {}, i + 1), el("td", { class: "num" }, t.prompt_token_ids.length),
        el("td", { class: "num" }, t.generation_token_ids.length), el("td", { class: "num" }, fmt(mean)),
        el("td", {}, t.finish_reason || "—"), el("td", {}, t.weight_version || "—"));
    })));
}

function renderDetail(r) {
  const pane = $("#detail-pane");
  document.body.dataset.detail = r?._episode ? "episode" : "";
  if (r?._episode) return renderEpisode(pane, state.episodes[r._episode], r._id);
  if (!r) {
    if (state.jobId) renderJobOverview(pane);
    else pane.replaceChildren(el("p", { class: "muted" }, "Pick a job, then a trajectory."));
    return;
  }
  const parts = [el("p", {}, el("a", { href: "#", id: "to-overview", onclick: (e) => { e.preventDefault(); writeHash({ traj: "" }); } },
    "\u2190 job overview")),
    el("h2", {}, r._failure ? "Failed task " : "Trajectory ", el("span", { class: "mono" }, r._id))];
  parts.push(el("div", { class: "headline" }, outcomeBadge(r.outcome),
    el("span", { class: "reward" }, "reward ", el("b", { id: "detail-reward" }, fmt(r.reward)))));
  if (r.error) {
    parts.push(el("div", { class: "error", id: "detail-error" }, el("b", {}, r.error.kind), " in ",
      el("b", {}, r.error.component), r.error.field ? " (field " + r.error.field + ")" : "", ": ", r.error.message));
  }
  const facts = [el("div", {}, el("h3", {}, "Task"), kv([["job", r.job_id], ["task", r.task?.task_id],
    ["env", r.task?.env], ["seed", r.task?.seed], ["group", r.group_id ? r.group_id + " #" + (r.sample_index ?? 0) : null],
    ["model", r.policy?.model], ["policy version", r.policy?.policy_version], ["input line", r.line]]))];
  if (r.reward_components) {
    facts.push(el("div", {}, el("h3", {}, "Reward components"),
      kv(Object.entries(r.reward_components).map(([k, v]) => [k, fmt(v)]))));
  }
  if (r.timings) {
    facts.push(el("div", {}, el("h3", {}, "Timings (s)"), kv(["total_s", "seed_s", "model_s", "tools_s", "verify_s"]
      .map((k) => [k.replace("_s", ""), fmt(r.timings[k], 3)]))));
  }
  parts.push(el("div", { class: "facts" }, facts));
  if (!r._failure) parts.push(el("h3", {}, "Turns"), renderTurns(r.turns));
  if (r.messages) parts.push(el("h3", {}, "Conversation"), el("div", { class: "conversation" }, r.messages.map(renderItem)));
  if (r.metrics && Object.keys(r.metrics).length) {
    parts.push(el("details", {}, el("summary", {}, "Metrics"), el("pre", {}, pretty(r.metrics))));
  }
  if (r.task?.row) parts.push(el("details", {}, el("summary", {}, "Task row"), el("pre", {}, pretty(r.task.row))));
  const raw = { ...r };
  delete raw._id; delete raw._index; delete raw._failure;
  parts.push(el("details", {}, el("summary", {}, "Raw record"), el("pre", {}, pretty(raw))));
  pane.replaceChildren(...parts);
}

// ---- the controller --------------------------------------------------------------------------
function showError(err) {
  const b = $("#banner");
  b.textContent = String(err.message || err);
  b.hidden = false;
  document.body.dataset.state = "error";
}

async function route() {
  const h = readHash();
  document.body.dataset.state = "loading";
  $("#banner").hidden = true;
  document.body.dataset.view = h.view === "learning" ? "learning" : "jobs";
  try {
    if (h.view === "learning") {
      await loadSummary();
      renderLearning();
      document.body.dataset.state = "ready";
      return;
    }
    if (!state.jobs.length || !h.job) await loadJobs();
    state.jobId = h.job || null;
    renderJobs();
    if (state.jobId && state.loadedJob !== state.jobId) await loadResults(state.jobId);
    if (state.jobId) renderList();
    if (state.jobId && !h.traj) await loadReport(state.jobs.find((j) => j.job_id === state.jobId));
    renderDetail(state.jobId ? state.records.find((r) => r._id === h.traj) : null);
    document.body.dataset.state = "ready";
  } catch (err) {
    showError(err);
  }
}

function init() {
  $("#token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim().replace(/^bearer\s+/i, ""));
    state.jobs = []; state.loadedJob = null;
    route();
  });
  $("#refresh").addEventListener("click", () => { state.jobs = []; state.loadedJob = null; state.report = null; route(); });
  $("#learning-refresh").addEventListener("click", () => route());
  const onFilter = () => writeHash({ env: $("#f-env").value, role: $("#f-role").value, outcome: $("#f-outcome").value,
                                     rmin: $("#f-rmin").value, rmax: $("#f-rmax").value });
  for (const id of ["#f-env", "#f-role", "#f-outcome", "#f-rmin", "#f-rmax"]) $(id).addEventListener("change", onFilter);
  window.addEventListener("hashchange", route);
  route();
}

init();
