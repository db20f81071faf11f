// Rollgate viewer: multi-role episodes (docs/roles.md). An `episode` line of the results stream
// holds one trajectory per role; the list shows each role's trajectory as a row, and opening any
// of them shows the whole episode with its roles side by side. Loaded before app.js, whose helpers
// (el, fmt, kv, pretty, outcomeBadge, renderTurns, renderItem, writeHash, state, $) these use.
"use strict";

// One `episode` record -> its role trajectories as list records, and the episode kept by id.
function addEpisode(rec, records) {
  const ep = { ...rec, roles: [] };
  for (const t of rec.trajectories || []) {
    const r = normalise({ ...t, episode_id: t.episode_id || rec.episode_id }, records.length);
    r._episode = rec.episode_id;
    records.push(r);
    ep.roles.push(r);
  }
  delete ep.trajectories; // the role records above are the one copy
  state.episodes[rec.episode_id] = ep;
}

// A roles job's overview: per role its trajectories, mean reward and outcomes (null: no roles).
function roleSummary(records) {
  const by = new Map();
  for (const r of records) {
    if (!r.role) continue;
    const s = by.get(r.role) || { n: 0, rewards: [], outcomes: {} };
    s.n += 1;
    if (typeof r.reward === "number") s.rewards.push(r.reward);
    s.outcomes[r.outcome] = (s.outcomes[r.outcome] || 0) + 1;
    by.set(r.role, s);
  }
  if (!by.size) return null;
  const mean = (xs) => (xs.length ? fmt(xs.reduce((a, b) => a + b, 0) / xs.length) : "—");
  return el("table", { class: "report", id: "role-summary" },
    el("thead", {}, el("tr", {}, ["role", "trajectories", "mean reward", "outcomes"].map((h) => el("th", {}, h)))),
    el("tbody", {}, [...by.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([role, s]) =>
      el("tr", { data: { role } }, el("td", {}, role), el("td", { class: "num" }, s.n),
        el("td", { class: "num" }, mean(s.rewards)),
        el("td", {}, Object.entries(s.outcomes).map(([o, n]) => o + " " + n).join(", "))))));
}

// An evaluation job with roles: per role and per policy, win / draw / loss rates and the score.
function renderPlayReport(body) {
  const cols = ["", "episodes", "win", "draw", "loss", "score (win + draw/2)"];
  const row = (kind, name, b) => el("tr", { data: { [kind]: name } }, el("td", {}, kind + " " + name),
    el("td", { class: "num" }, b.episodes), ...["win", "draw", "loss", "score"].map((k) => el("td", { class: "num" }, ci(b[k]))));
  const g = body.games;
  const without = Object.entries(g.without_result).map(([k, n]) => k + " " + n).join(", ");
  return el("div", { id: "report" },
    el("p", { class: "muted" }, g.with_result + " of " + g.planned + " games with a result" +
      (without ? " (without: " + without + ")" : "") + "; 95% bootstrap intervals over tasks."),
    el("table", { class: "report" }, el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))),
      el("tbody", {}, Object.entries(body.roles).map(([n, b]) => row("role", n, b)),
        Object.entries(body.policies).map(([n, b]) => row("policy", n, b)))));
}

function sampling(policy) {
  const s = policy?.sampling || {};
  return Object.keys(s).length ? Object.entries(s).map(([k, v]) => k + " " + v).join(", ") : null;
}

function renderRole(r, selected) {
  const parts = [
    el("h3", { class: "role-name" }, r.role || "?"),
    el("div", { class: "headline" }, outcomeBadge(r.outcome),
      el("span", { class: "reward" }, "reward ", el("b", { class: "role-reward" }, fmt(r.reward)))),
  ];
  if (r.error) {
    parts.push(el("div", { class: "error role-error" }, el("b", {}, r.error.kind), " in ",
      el("b", {}, r.error.component), ": ", r.error.message));
  }
  parts.push(kv([["model", r.policy?.model], ["policy version", r.policy?.policy_version],
    ["sampling", sampling(r.policy)], ["trajectory", el("span", { class: "mono", title: r._id }, r._id)],
    ["attempts", r.attempts > 1 ? r.attempts : null], ["time (s)", fmt(r.timings?.total_s, 2)]]));
  if (r.reward_components) {
    parts.push(kv(Object.entries(r.reward_components).map(([k, v]) => [k, fmt(v)])));
  }
  parts.push(el("h4", {}, "Turns"), renderTurns(r.turns));
  parts.push(el("h4", {}, "Conversation"), el("div", { class: "conversation" }, (r.messages || []).map(renderItem)));
  if (r.metrics && Object.keys(r.metrics).length) {
    parts.push(el("details", {}, el("summary", {}, "Metrics"), el("pre", {}, pretty(r.metrics))));
  }
  return el("section", { class: "role-col" + (selected ? " selected" : ""), data: { role: r.role || "", traj: r._id } },
    ...parts);
}

function renderEpisode(pane, ep, selectedId) {
  const first = ep.roles[0] || {};
  const parts = [el("p", {}, el("a", { href: "#", id: "to-overview", onclick: (e) => { e.preventDefault(); writeHash({ traj: "" }); } },
    "\u2190 job overview")),
    el("h2", {}, "Episode ", el("span", { class: "mono", id: "detail-episode", title: ep.episode_id }, ep.episode_id)),
    el("div", { class: "headline" }, outcomeBadge(ep.outcome), el("span", { class: "muted" }, ep.roles.length + " roles"))];
  parts.push(kv([["job", ep.job_id], ["task", first.task?.task_id], ["env", first.task?.env], ["seed", first.task?.seed],
    ["group", ep.group_id ? ep.group_id + " #" + (ep.sample_index ?? 0) : null]]));
  parts.push(el("div", { class: "roles" }, ep.roles.map((r) => renderRole(r, r._id === selectedId))));
  if (first.task?.row) parts.push(el("details", {}, el("summary", {}, "Task row"), el("pre", {}, pretty(first.task.row))));
  const raw = { ...ep, trajectories: ep.roles.map(({ _id, _index, _episode, ...t }) => t) };
  delete raw.roles;
  parts.push(el("details", {}, el("summary", {}, "Raw episode record"), el("pre", {}, pretty(raw))));
  pane.replaceChildren(...parts);
}
