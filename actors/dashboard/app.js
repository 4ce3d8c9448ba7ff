// The libtune dashboard: one page, routes in the URL's hash, data from the head's JSON
// API (same origin, the cluster token in a cookie), refreshed every second.
"use strict";

const REFRESH_MS = 1000;
const COLORS = ["#2f6fde", "#e8702a", "#1f9d55", "#d64545", "#8e5bd6", "#0fa3a3", "#c98a00", "#d6457f",
                "#5b7a99", "#7fa62f", "#a0522d", "#3c3c9e"];
let timer = null;
let generation = 0;  // a page load in flight for an older route is dropped
let updates = 0;

// Auto-packing's state (resources_per_trial gpu: "auto"): the share it sized from the
// probes' measured peak, or that it is still probing.
function autoCard(a) {
  if (!a) return "";
  if (a.phase !== "sized") return `<div class="card"><div class="n">probing</div><div class="l">auto-packing on ${num(a.probe_share)} of a GPU</div></div>`;
  const util = a.util !== undefined ? `, probe SM ${a.util}%` : "";
  const grown = a.outgrown ? `, ${a.outgrown} restarted bigger` : "";
  return `<div class="card"><div class="n">${num(a.share)}</div><div class="l">auto-packed share (${a.trials_per_card} per card; peak ${bytes(a.peak)} + ${Math.round(a.margin * 100)}%${util}${grown})</div></div>`;
}

function esc(v) {
  return String(v === undefined || v === null ? "" : v)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function num(v, digits) {
  if (v === null || v === undefined || v === "") return "–";
  if (typeof v !== "number") return esc(v);
  if (Number.isInteger(v)) return String(v);
  return String(parseFloat(v.toPrecision(digits || 4)));  // no trailing zeros: 0.5, not 0.5000
}
function secs(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}
function badge(state) { return `<span class="badge ${esc(state)}">${esc(state)}</span>`; }
function link(href, text) { return `<a href="${esc(href)}">${esc(text)}</a>`; }
function expLink(id, text) { return link(`#/experiments/${encodeURIComponent(id)}`, text || id); }
function trialLink(exp, trial) {
  return link(`#/experiments/${encodeURIComponent(exp)}/trials/${encodeURIComponent(trial)}`, trial);
}
function configText(cfg) {
  if (!cfg || typeof cfg !== "object") return "";
  return Object.keys(cfg).map(k => `${k}=${typeof cfg[k] === "number" ? num(cfg[k]) : JSON.stringify(cfg[k])}`).join(", ");
}
function table(head, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty)}</p>`;
  const th = head.map(h => h.startsWith("#") ? `<th class="num">${esc(h.slice(1))}</th>` : `<th>${esc(h)}</th>`).join("");
  return `<table><thead><tr>${th}</tr></thead><tbody>${rows.map(r => `<tr>${r}</tr>`).join("")}</tbody></table>`;
}

async function api(path) {
  const res = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (res.status === 401) { window.location.href = "/login"; throw new Error("signed out"); }
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || `${path}: HTTP ${res.status}`);
  return body;
}

// --- the plot ------------------------------------------------------------------

function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { hi = lo + 1; lo = lo - 1; }
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toFixed(12));
  return ticks;
}

// Draws every series ({name, points: [[x, y], ...]}) into the canvas; the best ones
// (by their best value, `maximize`) get a legend.
// The canvas at its displayed size (sharp on high-DPI screens), cleared.
function surface(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  g.font = "12px system-ui, sans-serif";
  return { g, w, h };
}

// Horizontal grid lines across [left, right] with their values at the left edge.
function yGrid(g, y0, y1, Y, left, right) {
  g.strokeStyle = "#e3e6ee";
  g.fillStyle = "#6b7385";
  g.lineWidth = 1;
  for (const t of niceTicks(y0, y1, 5)) {
    if (t < y0 || t > y1) continue;
    g.beginPath(); g.moveTo(left, Y(t)); g.lineTo(right, Y(t)); g.stroke();
    g.fillText(num(t, 3), 6, Y(t) + 4);
  }
}

function plot(canvas, series, yLabel, maximize) {
  const { g, w, h } = surface(canvas);
  const all = series.flatMap(s => s.points);
  canvas.dataset.points = String(all.length);
  canvas.dataset.series = String(series.filter(s => s.points.length).length);
  if (!all.length) {
    g.fillStyle = "#6b7385";
    g.fillText("No results yet.", 20, 30);
    return;
  }
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const pad = { l: 56, r: 16, t: 12, b: 34 };
  const X = x => pad.l + (x - x0) / (x1 - x0) * (w - pad.l - pad.r);
  const Y = y => h - pad.b - (y - y0) / (y1 - y0) * (h - pad.t - pad.b);
  yGrid(g, y0, y1, Y, pad.l, w - pad.r);
  for (const t of niceTicks(x0, x1, Math.min(8, Math.max(1, x1 - x0)))) {  // iterations: whole numbers
    if (t < x0 || t > x1 || !Number.isInteger(t)) continue;
    g.fillText(String(t), X(t) - 4, h - pad.b + 16);
  }
  g.fillText("iteration", w / 2 - 20, h - 4);
  series.forEach((s, i) => {
    if (!s.points.length) return;
    g.strokeStyle = COLORS[i % COLORS.length];
    g.fillStyle = g.strokeStyle;
    g.lineWidth = 1.6;
    g.beginPath();
    s.points.forEach((p, k) => k ? g.lineTo(X(p[0]), Y(p[1])) : g.moveTo(X(p[0]), Y(p[1])));
    g.stroke();
    const last = s.points[s.points.length - 1];
    g.beginPath(); g.arc(X(last[0]), Y(last[1]), 2.5, 0, 2 * Math.PI); g.fill();
  });
  g.fillStyle = "#1d2330";
  g.fillText(yLabel + (maximize ? " (higher is better)" : " (lower is better)"), pad.l + 6, pad.t + 12);
}

// [min, max] of many numbers (Math.min(...a) fails past the engine's argument limit).
function extent(a) {
  let lo = Infinity, hi = -Infinity;
  for (const v of a) { if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}

// The Pareto front (the board's "pareto": objectives, constraints, and per trial its
// values, constraint values, feasible, front): a scatter of the first two objectives
// (or, with one objective and constraints, the objective against the first
// constraint), with the trials marked by markFront.
function plotFront(canvas, p) {
  const { g, w, h } = surface(canvas);
  const two = p.objectives.length >= 2;
  const xy = t => two ? [t.values[0], t.values[1]] : [t.values[0], (t.constraint_values || [])[0]];
  const pts = p.trials.map(t => ({ t, v: xy(t) })).filter(q => Number.isFinite(q.v[0]) && Number.isFinite(q.v[1]));
  canvas.dataset.points = String(pts.length);
  canvas.dataset.front = String(pts.filter(q => q.t.front).length);
  canvas.dataset.infeasible = String(pts.filter(q => !q.t.feasible).length);
  if (!pts.length) {
    g.fillStyle = "#6b7385";
    g.fillText("No trial has reported every objective yet.", 20, 30);
    return;
  }
  let [x0, x1] = extent(pts.map(q => q.v[0])), [y0, y1] = extent(pts.map(q => q.v[1]));
  if (!two) { y0 = Math.min(y0, 0); y1 = Math.max(y1, 0); }  // the feasibility line shows
  const widen = (a, b) => a === b ? [a - (Math.abs(a) * 0.1 || 1), b + (Math.abs(b) * 0.1 || 1)] : [a - (b - a) * 0.04, b + (b - a) * 0.04];
  [x0, x1] = widen(x0, x1);
  [y0, y1] = widen(y0, y1);
  const pad = { l: 64, r: 16, t: 24, b: 38 };
  const X = x => pad.l + (x - x0) / (x1 - x0) * (w - pad.l - pad.r);
  const Y = y => h - pad.b - (y - y0) / (y1 - y0) * (h - pad.t - pad.b);
  yGrid(g, y0, y1, Y, pad.l, w - pad.r);
  for (const t of niceTicks(x0, x1, 6)) {
    if (t < x0 || t > x1) continue;
    g.beginPath(); g.moveTo(X(t), pad.t); g.lineTo(X(t), h - pad.b); g.stroke();
    g.fillText(num(t, 3), X(t) - 12, h - pad.b + 16);
  }
  const label = o => `${o.name} (${o.mode === "min" ? "lower" : "higher"} is better)`;
  g.fillStyle = "#1d2330";
  g.fillText(label(p.objectives[0]), w / 2 - 60, h - 6);
  g.fillText(two ? label(p.objectives[1]) : `${p.constraints[0]} (feasible at or below 0)`, pad.l + 6, pad.t - 8);
  if (!two) {
    g.strokeStyle = "#d64545";
    g.setLineDash([4, 4]);
    g.beginPath(); g.moveTo(pad.l, Y(0)); g.lineTo(w - pad.r, Y(0)); g.stroke();
    g.setLineDash([]);
  }
  markFront(g, pts, X, Y, p.objectives.length === 2);
}

// The trials: the front's filled (and joined by a line when `join`: a projection of more
// than two objectives would not be one), dominated ones hollow, infeasible ones crosses.
function markFront(g, pts, X, Y, join) {
  const front = pts.filter(q => q.t.front).sort((a, b) => a.v[0] - b.v[0]);
  if (join && front.length > 1) {
    g.strokeStyle = "#2f6fde";
    g.lineWidth = 1.4;
    g.beginPath();
    front.forEach((q, k) => k ? g.lineTo(X(q.v[0]), Y(q.v[1])) : g.moveTo(X(q.v[0]), Y(q.v[1])));
    g.stroke();
  }
  for (const q of pts) {
    const x = X(q.v[0]), y = Y(q.v[1]);
    g.lineWidth = 1.4;
    if (!q.t.feasible) {
      g.strokeStyle = "#d64545";
      g.beginPath(); g.moveTo(x - 3.5, y - 3.5); g.lineTo(x + 3.5, y + 3.5); g.moveTo(x + 3.5, y - 3.5); g.lineTo(x - 3.5, y + 3.5); g.stroke();
    } else if (q.t.front) {
      g.fillStyle = "#2f6fde";
      g.beginPath(); g.arc(x, y, 4.5, 0, 2 * Math.PI); g.fill();
    } else {
      g.strokeStyle = "#8a93a6";
      g.beginPath(); g.arc(x, y, 3.5, 0, 2 * Math.PI); g.stroke();
    }
  }
}

function frontTable(exp, p) {
  const on = p.trials.filter(t => t.front).sort((a, b) => (p.objectives[0].mode === "min" ? -1 : 1) * (b.values[0] - a.values[0]));  // best first
  const head = ["Trial"].concat(p.objectives.map(o => `#${o.name} (${o.mode})`), p.constraints.map(c => `#${c} (≤ 0)`));
  return table(head, on.map(t => `<td>${trialLink(exp, t.trial)}</td>` +
      t.values.map(v => `<td class="num">${num(v)}</td>`).join("") +
      (t.constraint_values || []).map(v => `<td class="num">${num(v)}</td>`).join("")),
    "No trial meets every constraint yet.");
}

function legend(series, maximize) {
  const best = s => s.points.length ? (maximize ? Math.max(...s.points.map(p => p[1])) : Math.min(...s.points.map(p => p[1]))) : null;
  const ranked = series.map((s, i) => ({ s, i, b: best(s) })).filter(r => r.b !== null)
    .sort((a, b) => maximize ? b.b - a.b : a.b - b.b).slice(0, 12);
  return ranked.map(r => `<span><i data-color="${COLORS[r.i % COLORS.length]}"></i>${esc(r.s.name)} ${num(r.b)}</span>`).join("");
}

// --- pages -----------------------------------------------------------------------

async function pageCluster() {
  const c = await api("/api/cluster");
  const gpus = c.gpus;
  const allocated = gpus.reduce((a, g) => a + g.allocated, 0);
  const running = c.experiments.reduce((a, e) => a + ((e.trials_by_state || {}).running || 0), 0);
  const cards = `<div class="cards">
    <div class="card"><div class="n" id="nodes-alive">${c.alive_nodes}</div><div class="l">nodes alive</div></div>
    <div class="card"><div class="n">${num(allocated, 3)} / ${gpus.length}</div><div class="l">GPUs allocated</div></div>
    <div class="card"><div class="n">${running}</div><div class="l">trials running</div></div>
    <div class="card"><div class="n">${c.experiments.filter(e => e.state === "running").length}</div><div class="l">experiments running</div></div>
    <div class="card"><div class="n">${c.placement_groups.filter(g => g.state === "created").length}</div><div class="l">placement groups placed</div></div>
  </div>`;
  const nodes = table(["Node", "Host", "State", "#CPUs free", "#GPUs free", "#Memory free", "Containment", "#Last heartbeat"],
    c.nodes.map(n => {
      const av = (n.resources || {}).available || {}, tot = (n.resources || {}).total || {};
      return `<td class="mono" data-node="${esc(n.id)}">${esc(n.id)}</td><td>${esc(n.host)} <span class="muted">${esc(n.address)}</span></td>
        <td>${badge(n.state)}${n.reason ? ` <span class="muted">${esc(n.reason)}</span>` : ""}</td>
        <td class="num">${num(av.cpu || 0)} / ${num(tot.cpu || 0)}</td><td class="num">${num(av.gpu || 0)} / ${num(tot.gpu || 0)}</td>
        <td class="num">${bytes(av.memory || 0)} / ${bytes(tot.memory || 0)}</td>
        <td>${n.containment ? `${badge(n.containment.kind)} <span class="muted">${esc(n.containment.description)}</span>` : "–"}</td>
        <td class="num">${n.alive ? Math.round(n.last_heartbeat_ms_ago) + " ms ago" : "–"}</td>`;
    }), "No node has joined yet: start one with tune start --address HOST:PORT.");
  const gpuRows = gpus.map(g => {
    const holders = g.holders.map(h => `<span class="holder">${h.trial ? trialLink(h.experiment, h.trial) : h.held_by ? `held by ${esc(h.held_by)}` : `<span class="mono">${esc(h.group)}</span>`}
        · ${num(h.share)} GPU · quota ${bytes(h.memory_quota)}${h.memory_used !== null ? ` · uses ${bytes(h.memory_used)}` : ""}${h.host_memory !== undefined ? ` · host ${bytes(h.host_memory)}` : ""}${h.cpu_seconds !== undefined ? ` · ${num(h.cpu_seconds, 1)} CPU-s` : ""}</span>`).join("");
    const foreign = g.foreign.map(f => `<span class="holder error">not this cluster's: pid ${esc(f.pid)} ${esc(f.name)}${f.user ? ` of ${esc(f.user)}` : ""} · ${bytes(f.memory)}${f.beside && f.beside.length ? ` · beside ${f.beside.map(esc).join(", ")} (left alone)` : ""}</span>`).join("")
      + (g.others ? `<span class="holder error">in use by another program: ${esc(g.others.who)} · kept clear ${bytes(g.others.memory)}${g.others.share > 0 ? ` and ${num(g.others.share, 3)} GPU` : ""}${g.others.holds_card ? " · not given whole" : ""}</span>` : "");
    return `<td class="mono">${esc(g.node)}</td><td class="num">${g.index}</td>
      <td>${esc(g.name)}${g.logical ? ' <span class="muted">(logical)</span>' : ""}<br><span class="muted mono">${esc(g.uuid)}</span></td>
      <td><span class="bar"><span data-width="${Math.min(100, g.allocated * 100)}"></span></span> ${num(g.allocated, 3)}</td>
      <td class="num">${g.memory_used === null ? "–" : bytes(g.memory_used)} / ${bytes(g.memory_total)}</td>
      <td data-gpu="${esc(g.uuid)}">${holders || '<span class="muted">free</span>'}${foreign}</td>`;
  });
  return `<h1>Cluster <span class="muted">${esc(c.head.address)}</span></h1>${cards}
    <h2>Nodes</h2>${nodes}
    <h2>GPUs</h2>${table(["Node", "#GPU", "Card", "Allocated", "#Memory used (audit)", "Held by"], gpuRows, "No GPUs in the cluster.")}`;
}

async function pageGroups() {
  const [groups, exps] = await Promise.all([api("/api/groups"), api("/api/gpus")]);
  const owner = {};
  for (const g of exps) for (const h of g.holders) if (h.trial) owner[h.group] = h;
  const rows = groups.map(g => {
    const bundles = g.bundles.map(b => `<span class="holder">#${b.index} ${badge(b.state)} ${esc(b.request)}
        ${b.node ? `on <span class="mono">${esc(b.node)}</span>` : ""}
        ${(b.gpus || []).map(c => `GPU ${c.index} (${num(c.share)})`).join(", ")}</span>`).join("");
    const o = owner[g.id];
    return `<td class="mono">${esc(g.id)}</td><td>${badge(g.state)}</td><td>${esc(g.strategy)}</td><td>${bundles}</td>
      <td>${o ? trialLink(o.experiment, o.trial) : '<span class="muted">–</span>'}</td>
      <td class="num">${secs(g.age_s)}</td><td>${esc(g.reason)}</td>`;
  });
  return `<h1>Placement groups</h1>
    ${table(["Group", "State", "Strategy", "Bundles", "Trial", "#Age", "Waiting for / why"], rows, "No placement groups.")}`;
}

async function pageExperiments() {
  const list = await api("/api/experiments");
  const rows = list.map(e => {
    const by = Object.entries(e.trials_by_state || {}).map(([s, n]) => `${badge(s)} ${n}`).join(" ");
    if (e.held_by)  // another user's: who holds what, nothing of it
      return `<td><span class="muted">held by ${esc(e.held_by)}</span><br><span class="muted mono">${esc(e.id)}</span></td>
        <td>${badge(e.state)}</td><td class="muted">–</td><td>${by}</td><td>–</td><td class="num">–</td><td class="num">–</td>
        <td class="muted">${esc(e.owner)}'s</td>`;
    return `<td>${expLink(e.id, e.name || e.id)}<br><span class="muted mono">${esc(e.id)}</span></td><td>${badge(e.state)}</td>
      <td>${(e.objectives || [{ name: e.metric, mode: e.mode }]).map(o => `${esc(o.name)} (${esc(o.mode)})`).join(", ")}${(e.constraints || []).length ? `<br><span class="muted">${e.constraints.map(c => esc(c) + " ≤ 0").join(", ")}</span>` : ""}</td><td>${by}</td>
      <td>${e.best ? `${trialLink(e.id, e.best.trial)} ${num(e.best.value)}` : "–"}</td>
      <td class="num">${e.results}</td><td class="num">${secs(e.elapsed_s)}</td>
      <td class="mono">${esc(e.host)}:${esc(e.dir)}</td>`;
  });
  return `<h1>Experiments</h1>
    ${table(["Experiment", "State", "Metric", "Trials", "Best", "#Results", "#Time", "Stored in"], rows,
            "No experiment has reported to this head yet: run a tuning script with --address pointing here.")}`;
}

async function pageExperiment(id) {
  const e = await api(`/api/experiments/${encodeURIComponent(id)}`);
  const maximize = e.mode !== "min";
  const series = e.trial_table.map(t => ({ name: t.id, points: t.curve || [] }));
  const rows = e.trial_table.map(t => `<td>${trialLink(e.id, t.id)}</td><td>${badge(t.state)}</td>
      <td class="num">${t.iteration}</td><td class="num">${num(t.value)}</td>
      <td class="mono">${esc(t.node)}</td><td class="num">${t.pid === undefined ? "–" : t.pid}</td>
      <td class="mono">${(t.gpus || []).map(g => esc(typeof g === "object" ? (g.uuid || JSON.stringify(g)) : g)).join("<br>")}</td>
      <td class="mono">${esc(configText(t.config))}</td><td class="error">${esc(t.error)}</td>`);
  const by = Object.entries(e.trials_by_state || {}).map(([s, n]) => `${badge(s)} ${n}`).join(" ");
  const p = e.pareto;
  window.requestAnimationFrame(() => {
    const c = document.getElementById("curves");
    if (c) plot(c, series, e.metric, maximize);
    const f = document.getElementById("front");
    if (f && p) plotFront(f, p);
  });
  const objectives = p ? p.objectives.map(o => `${esc(o.name)} (${esc(o.mode)})`).join(" × ") : "";
  const several = p && p.objectives.length > 1;
  const frontSection = !p ? "" : `<h2>${several ? "Pareto front" : "Constraints"}: ${objectives}${p.constraints.length ? ` <span class="muted">subject to ${p.constraints.map(c => esc(c) + " ≤ 0").join(", ")}</span>` : ""}</h2>
    <div class="plot"><canvas id="front"></canvas><div class="legend"><span><i data-color="#2f6fde"></i>${several ? "on the front" : "best feasible"} (${p.front_size})</span>
      <span><i data-color="#8a93a6"></i>dominated</span><span><i data-color="#d64545"></i>over a constraint</span>
      ${p.objectives.length > 2 ? `<span class="muted">the first two of ${p.objectives.length} objectives; the front is over all of them</span>` : ""}</div></div>
    ${frontTable(e.id, p)}`;
  return `<h1>${esc(e.name)} ${badge(e.state)} <span class="muted mono">${esc(e.id)}</span></h1>
    ${e.error ? `<p class="error">${esc(e.error)}</p>` : ""}
    <div class="cards">
      <div class="card"><div class="n">${e.trials}</div><div class="l">trials ${by}</div></div>
      <div class="card"><div class="n">${e.best ? num(e.best.value) : "–"}</div><div class="l">best ${esc(e.metric)} ${e.best ? esc(e.best.trial) : ""}</div></div>
      ${p ? `<div class="card"><div class="n" id="front-size">${p.front_size}</div><div class="l">${several ? "trials on the Pareto front" : "best trials that meet the constraints"}</div></div>` : ""}
      <div class="card"><div class="n">${e.results}</div><div class="l">results</div></div>
      <div class="card"><div class="n">${secs(e.elapsed_s)}</div><div class="l">elapsed</div></div>
      ${autoCard(e.auto_packing)}
    </div>
    ${frontSection}
    <h2>Learning curves: ${esc(e.metric)}</h2>
    <div class="plot"><canvas id="curves"></canvas><div class="legend">${legend(series, maximize)}</div></div>
    <h2>Trials</h2>
    ${table(["Trial", "State", "#Iteration", "#" + e.metric, "Node", "#PID", "GPUs", "Config", "Error"], rows, "No trials yet.")}
    <p class="muted">Stored in <span class="mono">${esc(e.host)}:${esc(e.dir)}</span> · program pid ${esc(e.pid)}</p>`;
}

// A tracker's run: a link to its page when it has one (a server's), else where it is.
function runLink(r) {
  const url = String(r.url || "");
  return /^https?:\/\//.test(url)
    ? `<a href="${esc(url)}" target="_blank" rel="noopener">${esc(r.id || url)}</a>`
    : `<span class="mono">${esc(r.id || "")}</span> <span class="muted">${esc(url)}</span>`;
}

async function pageTrial(exp, id) {
  const t = await api(`/api/experiments/${encodeURIComponent(exp)}/trials/${encodeURIComponent(id)}`);
  const maximize = t.mode !== "min";
  const kv = (k, v) => `<tr><td>${esc(k)}</td><td>${v}</td></tr>`;
  const gpus = (t.gpus || []).map(g => typeof g === "object"
    ? `<span class="holder mono">${esc(g.uuid || "")} ${g.pci_bus_id ? esc(g.pci_bus_id) : ""} ${g.memory ? "quota " + bytes(g.memory) : ""}</span>`
    : `<span class="holder mono">${esc(g)}</span>`).join("");
  const info = `<table class="kv"><tbody>
    ${kv("State", badge(t.state))}
    ${kv("Experiment", expLink(t.experiment, t.experiment_name || t.experiment))}
    ${kv("Node", `<span class="mono">${esc(t.node)}</span>`)}
    ${kv("PID", t.pid === undefined ? "–" : esc(t.pid))}
    ${kv("GPUs", gpus || '<span class="muted">none</span>')}
    ${t.containment ? kv("Contained by", `${esc(t.containment)}${t.left_behind_count ? ` <span class="error">· ${esc(t.left_behind_count)} process(es) it left behind were killed</span>` : ""}`) : ""}
    ${t.host_memory_peak !== undefined || t.gpu_memory_peak !== undefined ? kv("Peak memory", `host ${t.host_memory_peak !== undefined ? bytes(t.host_memory_peak) : "–"} · GPU ${t.gpu_memory_peak !== undefined ? bytes(t.gpu_memory_peak) : "–"}`) : ""}
    ${t.cpu_seconds !== undefined ? kv("CPU time", num(t.cpu_seconds, 2) + " s") : ""}
    ${kv("Placement group", `<span class="mono">${esc(t.group)}</span>`)}
    ${kv("Iteration", esc(t.iteration))}
    ${kv(`Latest ${t.metric}`, num(t.value))}
    ${kv("Starts / failures", `${esc(t.starts)} / ${esc(t.failures)}`)}
    ${kv("Latest checkpoint", t.checkpoint >= 0 ? "iteration " + esc(t.checkpoint) : "none")}
    ${kv("Trial folder", `<span class="mono">${esc(t.trial_dir)}</span>`)}
    ${t.tensorboard_dir ? kv("TensorBoard", `<span class="mono">tensorboard --logdir ${esc(t.tensorboard_dir)}</span>`) : ""}
    ${t.mlflow_run ? kv("MLflow run", runLink(t.mlflow_run)) : ""}
    ${t.wandb_run ? kv("W&B run", runLink(t.wandb_run)) : ""}
    ${kv("Error", t.error ? `<span class="error">${esc(t.error)}</span>` : '<span class="muted">none</span>')}
    ${t.last_failure ? kv("Last failure", `<span class="error">${esc(t.last_failure)}</span>`) : ""}
  </tbody></table>`;
  const cfg = table(["Parameter", "Value"], Object.entries(t.config || {}).map(([k, v]) =>
    `<td class="mono">${esc(k)}</td><td class="mono">${esc(typeof v === "number" ? num(v, 6) : JSON.stringify(v))}</td>`), "No configuration.");
  const last = table(["Metric", "#Value"], Object.entries(t.last_result || {}).map(([k, v]) =>
    `<td class="mono">${esc(k)}</td><td class="num">${num(v, 6)}</td>`), "No result yet.");
  const history = table(["#Iteration", "#" + t.metric], (t.curve || []).slice().reverse().map(p =>
    `<td class="num">${p[0]}</td><td class="num">${num(p[1], 6)}</td>`), "No results yet.");
  window.requestAnimationFrame(() => {
    const c = document.getElementById("curves");
    if (c) plot(c, [{ name: t.id, points: t.curve || [] }], t.metric, maximize);
  });
  return `<h1>${esc(t.id)} ${badge(t.state)} <span class="muted">in ${expLink(t.experiment, t.experiment_name || t.experiment)}</span></h1>
    <div class="grid"><div><h2>Trial</h2>${info}</div><div><h2>Config</h2>${cfg}<h2>Latest result</h2>${last}</div></div>
    <h2>History: ${esc(t.metric)}</h2><div class="plot"><canvas id="curves"></canvas></div>
    <h2>Results</h2>${history}`;
}

// --- routing ---------------------------------------------------------------------

function route() {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "groups") return { page: "groups", load: pageGroups };
  if (parts[0] === "experiments" && parts.length >= 4 && parts[2] === "trials")
    return { page: "experiments", load: () => pageTrial(parts[1], parts[3]) };
  if (parts[0] === "experiments" && parts.length >= 2) return { page: "experiments", load: () => pageExperiment(parts[1]) };
  if (parts[0] === "experiments") return { page: "experiments", load: pageExperiments };
  return { page: "cluster", load: pageCluster };
}

async function render() {
  const mine = ++generation;
  const r = route();
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.page === r.page);
  const live = document.getElementById("live");
  try {
    const html = await r.load();
    if (mine !== generation) return;
    const scroll = window.scrollY;
    const main = document.getElementById("main");
    main.innerHTML = html;
    // Sizes and colours through the DOM: the page's policy allows no inline styles.
    for (const el of main.querySelectorAll("[data-width]")) el.style.width = el.dataset.width + "%";
    for (const el of main.querySelectorAll("[data-color]")) el.style.background = el.dataset.color;
    window.scrollTo(0, scroll);
    updates++;
    document.body.dataset.updates = String(updates);
    document.body.dataset.route = window.location.hash || "#/";  // what is shown (for tests)
    live.textContent = "live · " + new Date().toLocaleTimeString();
    live.classList.remove("stale");
  } catch (err) {
    if (mine !== generation) return;
    live.textContent = "not updating: " + err.message;
    live.classList.add("stale");
    if (!document.getElementById("main").dataset.loaded)
      document.getElementById("main").innerHTML = `<p class="error">${esc(err.message)}</p>`;
    return;
  }
  document.getElementById("main").dataset.loaded = "1";
}

function start() {
  if (timer) window.clearInterval(timer);
  document.getElementById("main").dataset.loaded = "";
  render();
  timer = window.setInterval(render, REFRESH_MS);
}

window.addEventListener("hashchange", start);
window.addEventListener("resize", render);
Promise.all([api("/api/cluster"), api("/api/whoami")]).then(([c, me]) => {
  document.getElementById("footer").textContent =
    `head ${c.head.address} · libtune ${c.head.version} · signed in as ${me.admin ? "the cluster's admin" : me.name}`;
}).catch(() => {});
start();
