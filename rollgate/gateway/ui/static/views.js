// Rollgate viewer: the learning views (a job's overview with its charts and evaluation report;
// the learning curve across jobs). Loaded before app.js, whose helpers (el, fmt, kv, state, $)
// these functions use when they are called.
"use strict";

// ---- rendering: one job's charts (from the records loaded for the list) and its eval report --
const ci = (m) => (m ? fmt(m.value) + " [" + fmt(m.ci[0]) + ", " + fmt(m.ci[1]) + "]" : "—");

function renderJobOverview(pane) {
  const job = state.jobs.find((j) => j.job_id === state.jobId) || { job_id: state.jobId };
  const parts = [el("h2", {}, job.purpose === "eval" ? "Evaluation job " : "Job ", el("span", { class: "mono" }, job.job_id))];
  parts.push(kv([["purpose", job.purpose], ["state", job.state], ["policy version", job.policy_version],
    ["model", job.model], ["records", jobProgress(job)], ["mean reward", typeof job.mean_reward === "number" ? fmt(job.mean_reward) : null],
    ["k / threshold", job.eval ? job.eval.k + " / " + (job.roles ? "scored by play" : "reward \u2265 " + job.eval.threshold) : null]]));
  const rewards = state.records.map((r) => r.reward).filter((x) => typeof x === "number");
  const note = state.truncated ? " (first " + MAX_RECORDS + " records)" : "";
  parts.push(el("h3", {}, "Reward histogram" + note));
  if (rewards.length) {
    parts.push(el("div", { id: "hist", class: "chart-box" }, histogram({ values: rewards, bins: 10,
      lo: Math.min(0, ...rewards), hi: Math.max(1, ...rewards) })));
  } else parts.push(el("p", { class: "muted", id: "hist" }, "no record with a reward yet"));
  const byEnv = new Map();
  for (const r of state.records) {
    const env = r.task?.env || "(no env)";
    const counts = byEnv.get(env) || {};
    counts[r.outcome] = (counts[r.outcome] || 0) + 1;
    byEnv.set(env, counts);
  }
  parts.push(el("h3", {}, "Outcomes per environment" + note));
  if (byEnv.size) {
    parts.push(el("div", { id: "outcomes", class: "chart-box" }, stackedBars({ keys: OUTCOMES,
      rows: [...byEnv.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([label, counts]) => ({ label, counts })) })));
  } else parts.push(el("p", { class: "muted", id: "outcomes" }, "no records yet"));
  const roles = roleSummary(state.records);
  if (roles) parts.push(el("h3", {}, "Roles" + note), roles);
  if (job.purpose === "eval") parts.push(el("h3", {}, "Evaluation report"), renderReport(state.report));
  pane.replaceChildren(...parts);
}

function renderReport(rep) {
  if (!rep) return el("p", { class: "muted" }, "loading…");
  if (rep.error) return el("p", { class: "muted", id: "report" }, rep.error);
  const body = rep.body;
  if (body.kind === "rollgate.eval.play") return renderPlayReport(body); // a job with roles (roles.js)
  const ks = body.config.pass_k;
  const kMax = Math.max(...ks);
  const cols = ["env", "tasks", "samples", "failed", "mean reward", "pass@1", ...(kMax > 1 ? ["pass@" + kMax] : [])];
  const row = (name, b) => el("tr", { data: { env: name } }, el("td", {}, name), el("td", { class: "num" }, b.tasks),
    el("td", { class: "num" }, b.samples), el("td", { class: "num" }, b.failed_samples),
    el("td", { class: "num" }, ci(b.mean_reward)), el("td", { class: "num" }, ci(b["pass@1"])),
    ...(kMax > 1 ? [el("td", { class: "num" }, ci(b["pass@" + kMax]))] : []));
  return el("div", { id: "report" },
    el("p", { class: "muted" }, "model " + (body.model.name ?? "?") + ", policy version " + (body.model.policy_version ?? "—") +
      "; correct: " + body.config.correct + "; 95% bootstrap intervals over tasks; failed samples excluded, not wrong."),
    el("table", { class: "report" }, el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))),
      el("tbody", {}, Object.entries(body.envs).map(([n, b]) => row(n, b)), row("overall", body.overall))));
}

// ---- rendering: the learning curve across jobs ------------------------------------------------
// Training reward per policy version beside the latest evaluation of that version.
function renderLearning() {
  const versions = state.summary?.versions || [];
  const cats = versions.map((v) => v.policy_version ?? "(none)");
  const latest = (v) => [...v.eval].reverse().find((e) => e.mean_reward);
  const pts = (pick) => versions.map((v, i) => pick(v, i)).filter(Boolean);
  const train = pts((v, i) => (typeof v.train?.mean_reward === "number"
    ? { i, y: v.train.mean_reward, title: `train @ ${cats[i]}: ${fmt(v.train.mean_reward)} over ${v.train.rewarded} records, ${v.train.jobs} jobs` } : null));
  const evalPoint = (key) => (v, i) => {
    const m = latest(v)?.[key];
    return m ? { i, y: m.value, lo: m.ci[0], hi: m.ci[1], title: `eval ${key} @ ${cats[i]}: ${ci(m)} over ${m.tasks} tasks` } : null;
  };
  const box = $("#curve");
  if (!versions.length) {
    box.replaceChildren(el("p", { class: "muted" }, "no finished job yet: the curve appears when jobs end"));
  } else {
    box.replaceChildren(lineChart({ categories: cats, yLabel: "reward", series: [
      { name: "train mean reward", cls: "s-train", marker: "circle", line: true, points: train },
      { name: "eval mean reward", cls: "s-eval", marker: "square", line: true, points: pts(evalPoint("mean_reward")) },
      { name: "eval pass@1", cls: "s-pass", marker: "diamond", line: true, points: pts(evalPoint("pass@1")) },
    ] }));
  }
  const rows = versions.flatMap((v, i) => {
    const evals = v.eval.length ? v.eval : [null];
    return evals.map((e, j) => el("tr", { data: { version: cats[i] } },
      el("td", {}, j === 0 ? cats[i] : ""),
      el("td", { class: "num" }, j === 0 && v.train ? v.train.jobs : ""),
      el("td", { class: "num" }, j === 0 && v.train ? fmt(v.train.mean_reward) : ""),
      el("td", { class: "mono" }, e ? el("a", { href: "#job=" + encodeURIComponent(e.job_id) }, e.job_id) : "—"),
      el("td", { class: "num" }, e ? ci(e.mean_reward) : ""),
      el("td", { class: "num" }, e ? ci(e["pass@1"]) : ""),
      el("td", { class: "num" }, e && e.pass_k > 1 ? "@" + e.pass_k + " " + ci(e["pass@" + e.pass_k]) : ""),
      el("td", { class: "num" }, e && e.samples !== undefined ? e.failed_samples + "/" + e.samples : e?.report || "")));
  });
  $("#versions tbody").replaceChildren(...rows);
  const s = state.summary || {};
  $("#learning-summary").textContent = (s.finished_jobs ?? 0) + " finished jobs over " + versions.length +
    " policy versions" + (s.running_jobs ? "; " + s.running_jobs + " running (not plotted)" : "");
}
