// rlnode dashboard: draws /cluster, /runs, /traces and /episodes from the JSON under
// /api/. No libraries; the charts are SVG. Every value from the server is
// set as text, never as markup.
"use strict";

const main = document.getElementById("main");
const updated = document.getElementById("updated");
let timer = null;

// el builds an element: el("td", {class: "x"}, "text", child, ...).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "style") e.style.cssText = v; // through CSSOM: the page's CSP refuses style attributes
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}
const svgNS = "http://www.w3.org/2000/svg";
function sv(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store", credentials: "same-origin"});
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch (e) { throw new Error(url + ": HTTP " + r.status + ": " + text.slice(0, 300)); }
  if (!r.ok && body && body.error) throw new Error(body.error);
  return body;
}

function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return String(Math.round(v * 1000) / 1000);
}
// fmtAmount writes an amount of resource k: memory (bytes) in GiB.
function fmtAmount(k, v) {
  if (k === "memory" && typeof v === "number") return (v / 2 ** 30).toFixed(1) + " GiB";
  return fmtNum(v);
}
function fmtDur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h > 0 ? `${h}h${String(m).padStart(2, "0")}m` : m > 0 ? `${m}m${String(r).padStart(2, "0")}s` : `${r}s`;
}
function stateBadge(s) { return el("span", {class: "state " + s}, s); }
function stamp() { updated.textContent = "updated " + new Date().toLocaleTimeString(); }
function banner(msg) { return el("div", {class: "banner", role: "alert"}, msg); }

// every runs f now and then every ms, until the page changes.
function every(ms, f) {
  const tick = async () => {
    try {
      await f();
      const old = document.getElementById("fetch-error");
      if (old) old.remove();
    } catch (e) {
      const b = banner("The dashboard does not answer: " + String(e.message || e));
      b.id = "fetch-error";
      const old = document.getElementById("fetch-error");
      if (old) old.replaceWith(b); else main.prepend(b);
    }
    timer = setTimeout(tick, ms);
  };
  tick();
}

// ---- Cluster ----

function resourceCell(n, key) {
  const total = (n.total || {})[key] || 0, used = (n.used || {})[key] || 0;
  if (total === 0) return el("td", {}, "–");
  const pct = Math.min(100, Math.round(100 * used / total));
  return el("td", {}, el("span", {class: "bar"}, el("i", {style: `width:${pct}%`})), `${fmtNum(used)} / ${fmtNum(total)} used, ${fmtNum(total - used)} free`);
}

function drawCluster(v) {
  const out = [];
  if (v.error) {
    out.push(banner("Cannot ask the cluster: " + v.error + (v.taken ? "\nShowing what it said at " + new Date(v.taken).toLocaleTimeString() + "." : "")));
  }
  const live = v.nodes.filter(n => !n.gone_since).length;
  const totals = v.totals || {};
  const sum = Object.keys(totals).sort().map(k => `${k} ${fmtAmount(k, totals[k].used)}/${fmtAmount(k, totals[k].total)} used`).join(" · ");
  out.push(el("p", {class: "muted"}, `${live} live node${live === 1 ? "" : "s"}` + (v.asked ? ` · as node ${v.asked} sees it` : "") + (sum ? " · " + sum : "")));

  out.push(el("h2", {}, "Nodes"));
  const nt = el("table", {id: "nodes"}, el("tr", {}, ...["node", "state", "gossip", "actors at", "CPUs", "GPUs", "CPU", "GPU", "other resources", "labels", "tasks", "objects", "uptime"].map(h => el("th", {}, h))));
  for (const n of v.nodes) {
    const other = Object.keys(n.total || {}).filter(k => k !== "CPU" && k !== "GPU").sort()
      .map(k => `${k} ${fmtAmount(k, (n.used || {})[k] || 0)}/${fmtAmount(k, n.total[k])}`).join(", ");
    const labels = Object.keys(n.labels || {}).sort().map(k => `${k}=${n.labels[k]}`).join(", ");
    const gpus = (n.gpus || []).map(g => g.name).join(", ");
    const up = n.gone_since ? "gone " + new Date(n.gone_since).toLocaleTimeString() : fmtDur(n.uptime_s);
    nt.append(el("tr", {"data-node": n.id, "data-state": n.state, class: n.gone_since ? "gone" : null},
      el("td", {}, n.id), el("td", {}, stateBadge(n.state)), el("td", {}, n.gossip_address || "–"), el("td", {}, n.actor_address || "–"),
      el("td", {}, fmtNum(n.cpus)), el("td", {title: gpus}, String((n.gpus || []).length) + (gpus ? " (" + gpus + ")" : "")),
      resourceCell(n, "CPU"), resourceCell(n, "GPU"), el("td", {class: "wrap"}, other || "–"),
      el("td", {class: "wrap"}, labels || "–"), el("td", {}, n.gone_since ? "–" : String(n.tasks || 0)),
      el("td", {}, n.gone_since ? "–" : `${n.objects || 0}` + (n.objects ? ` (${fmtAmount("memory", n.object_bytes || 0)}` + (n.object_spilled_bytes ? `, ${fmtAmount("memory", n.object_spilled_bytes)} spilled` : "") + ")" : "")), el("td", {}, up)));
  }
  out.push(nt);

  const jobs = v.jobs || [];
  out.push(el("h2", {}, `Jobs (${jobs.length})`));
  if (jobs.length === 0) out.push(el("p", {class: "muted"}, "No jobs: rlnode submit RECIPE starts one."));
  else {
    const jt = el("table", {id: "jobs"}, el("tr", {}, ...["job", "status", "node", "restarts", "how it ended, why it restarts, or what it waits for"].map(h => el("th", {}, h))));
    for (const j of jobs.slice(0, 2000)) {
      jt.append(el("tr", {"data-job": j.name, "data-status": j.status}, el("td", {}, j.name), el("td", {}, stateBadge(j.status)),
        el("td", {}, j.node || "–"), el("td", {}, j.restarts), el("td", {class: "wrap"}, j.cause || "")));
    }
    out.push(jt);
    if (jobs.length > 2000) out.push(el("p", {class: "muted"}, `${jobs.length - 2000} more not shown.`));
  }

  out.push(el("h2", {}, `Actors (${v.actors.length})`));
  if (v.actors.length === 0) out.push(el("p", {class: "muted"}, "No actors."));
  else {
    const at = el("table", {id: "actors"}, el("tr", {}, ...["actor", "kind", "node", "state", "restarts", "death cause", "placement group"].map(h => el("th", {}, h))));
    const shown = v.actors.slice(0, 2000);
    for (const a of shown) {
      at.append(el("tr", {"data-actor": a.name, "data-state": a.state}, el("td", {}, a.name), el("td", {}, a.kind), el("td", {}, a.node),
        el("td", {}, stateBadge(a.state)), el("td", {}, a.restarts), el("td", {class: "wrap"}, a.death_cause || ""), el("td", {}, a.placement_group || "")));
    }
    out.push(at);
    if (v.actors.length > shown.length) out.push(el("p", {class: "muted"}, `${v.actors.length - shown.length} more not shown.`));
  }

  out.push(el("h2", {}, `Placement groups (${v.placement_groups.length})`));
  if (v.placement_groups.length === 0) out.push(el("p", {class: "muted"}, "No placement groups."));
  else {
    const gt = el("table", {id: "groups"}, el("tr", {}, ...["group", "state", "strategy", "bundles", "nodes (or what it waits for)"].map(h => el("th", {}, h))));
    for (const g of v.placement_groups) {
      // A bundle is {resources, labels}.
      const bundles = (g.bundles || []).map(b => {
        const r = b.resources || {}, l = b.labels || {};
        const labels = Object.keys(l).sort().map(k => `${k}=${l[k]}`).join(",");
        return "{" + Object.keys(r).sort().map(k => `${k}: ${fmtAmount(k, r[k])}`).join(", ") + "}" + (labels ? " " + labels : "");
      }).join(" ");
      const state = g.state || "CREATED"; // a node of an older build says none
      const where = state === "PENDING" ? g.pending || "" : (g.nodes || []).join(", ");
      gt.append(el("tr", {"data-group": g.id, "data-state": state}, el("td", {}, g.id), el("td", {}, stateBadge(state)), el("td", {}, g.strategy),
        el("td", {class: "wrap"}, bundles), el("td", {class: "wrap"}, where)));
    }
    out.push(gt);
  }
  main.replaceChildren(...out);
  stamp();
}

function clusterPage() {
  every(1000, async () => drawCluster(await getJSON("/api/cluster")));
}

// ---- Runs ----

const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f", "#78350f", "#475569", "#0f766e", "#a21caf", "#b45309", "#1e40af", "#15803d", "#7f1d1d"];
// Metrics first in this order, the rest alphabetically.
const preferred = ["reward_mean", "eval_accuracy", "turn1_accuracy", "turn2_accuracy", "turn3_accuracy", "turn1_reward_mean", "approx_kl", "ref_kl", "kl_penalty",
  "entropy", "clip_frac", "clip_frac_high", "loss", "grad_norm", "lr", "tokens_per_s", "gen_s", "train_s", "sync_s", "eval_s", "weight_lag"];

const runsState = {
  selected: new URLSearchParams(location.search).getAll("run"),
  smooth: Number(new URLSearchParams(location.search).get("smooth") || 0),
  log: new URLSearchParams(location.search).get("log") === "1",
  // range: the steps every chart is zoomed to, [from, to], or null.
  range: (() => {
    const q = new URLSearchParams(location.search), a = Number(q.get("from")), b = Number(q.get("to"));
    return q.has("from") && q.has("to") && b > a ? [a, b] : null;
  })(),
  filter: "",
  list: null,
  series: null,
  diff: null,
  error: "",
};

function saveURL() {
  const q = new URLSearchParams();
  for (const r of runsState.selected) q.append("run", r);
  if (runsState.smooth > 0) q.set("smooth", String(runsState.smooth));
  if (runsState.log) q.set("log", "1");
  if (runsState.range) { q.set("from", String(runsState.range[0])); q.set("to", String(runsState.range[1])); }
  history.replaceState(null, "", "/runs" + (q.toString() ? "?" + q : ""));
}

// niceTicks returns about n round values spanning [lo, hi].
function niceTicks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

// chart draws one metric of the selected runs, overlaid.
function chart(metric, runs) {
  const W = 440, H = 200, L = 54, R = 10, T = 8, B = 22;
  const log = runsState.log;
  const lines = [];
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, raw = 0, shown = 0;
  runs.forEach((r, i) => {
    const s = r.metrics[metric];
    if (!s) return;
    const pts = [];
    for (let k = 0; k < s.x.length; k++) {
      let y = s.y[k];
      if (log) { if (!(y > 0)) continue; y = Math.log10(y); }
      pts.push([s.x[k], y]);
      x0 = Math.min(x0, s.x[k]); x1 = Math.max(x1, s.x[k]); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    raw += s.raw; shown += pts.length;
    lines.push({run: r, color: palette[i % palette.length], pts});
  });
  const box = el("div", {class: "chart", "data-metric": metric});
  const sub = raw === shown ? `${raw} points` : `${shown} of ${raw} points`;
  box.append(el("div", {class: "title"}, metric, el("span", {class: "sub"}, sub + (log ? " · log scale" : ""))));
  const svg = sv("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-metric": metric});
  box.append(svg);
  if (shown === 0) {
    box.append(el("p", {class: "muted"}, log ? "No positive values to draw on a log scale." : "No values."));
    return box;
  }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.04; y0 -= pad; y1 += pad;
  const px = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  // On a log scale: powers of ten when the range spans a decade or more,
  // else round values between the ends (y is log10 of the value).
  let yTicks = niceTicks(y0, y1, 4);
  if (log && y1 - y0 < 1) yTicks = niceTicks(Math.pow(10, y0), Math.pow(10, y1), 4).filter(v => v > 0).map(Math.log10);
  else if (log) yTicks = niceTicks(Math.ceil(y0), Math.floor(y1), 4).filter(Number.isInteger);
  for (const t of yTicks) {
    svg.append(sv("line", {class: "grid", x1: L, x2: W - R, y1: py(t), y2: py(t)}));
    const lab = sv("text", {class: "tick", x: L - 4, y: py(t) + 3, "text-anchor": "end"});
    lab.textContent = log ? fmtNum(Math.pow(10, t)) : fmtNum(t);
    svg.append(lab);
  }
  for (const t of niceTicks(x0, x1, 5)) {
    const lab = sv("text", {class: "tick", x: px(t), y: H - 6, "text-anchor": "middle"});
    lab.textContent = fmtNum(t);
    svg.append(lab);
  }
  svg.append(sv("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  svg.append(sv("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
  for (const ln of lines) {
    const attrs = {fill: "none", stroke: ln.color, "stroke-width": 1.5, "vector-effect": "non-scaling-stroke",
      "data-run": ln.run.id, "data-points": ln.pts.length, points: ln.pts.map(p => px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1)).join(" ")};
    svg.append(sv(ln.pts.length === 1 ? "polyline" : "polyline", attrs));
    if (ln.pts.length === 1) svg.append(sv("circle", {cx: px(ln.pts[0][0]), cy: py(ln.pts[0][1]), r: 2.5, fill: ln.color}));
  }
  // Hover: a cursor line and each run's value at the nearest step.
  const cursor = sv("line", {class: "axis", y1: T, y2: H - B, visibility: "hidden"});
  svg.append(cursor);
  const tip = el("div", {class: "tip"});
  box.append(tip);
  svg.addEventListener("mousemove", ev => {
    const rect = svg.getBoundingClientRect();
    const vx = (ev.clientX - rect.left) / rect.width * W;
    const x = x0 + (vx - L) / (W - L - R) * (x1 - x0);
    const rows = [];
    let at = null;
    for (const ln of lines) {
      let best = null;
      for (const p of ln.pts) if (best === null || Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
      if (!best) continue;
      at = at === null ? best[0] : at;
      rows.push(`${ln.run.name}: ${fmtNum(log ? Math.pow(10, best[1]) : best[1])} (step ${best[0]})`);
    }
    if (at === null) return;
    cursor.setAttribute("x1", px(at)); cursor.setAttribute("x2", px(at)); cursor.setAttribute("visibility", "visible");
    tip.textContent = rows.join("\n");
    tip.style.display = "block";
    tip.style.left = Math.min(ev.clientX - box.getBoundingClientRect().left + 12, box.clientWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = "28px";
  });
  svg.addEventListener("mouseleave", () => { tip.style.display = "none"; cursor.setAttribute("visibility", "hidden"); });
  // Drag across a chart to zoom every chart to those steps (the server
  // decimates again within them); double-click to see every step again.
  const band = sv("rect", {y: T, height: H - T - B, fill: "rgba(37,99,235,0.12)", visibility: "hidden"});
  svg.append(band);
  const stepAt = ev => { const rect = svg.getBoundingClientRect(); return x0 + (((ev.clientX - rect.left) / rect.width * W) - L) / (W - L - R) * (x1 - x0); };
  let dragFrom = null;
  svg.addEventListener("mousedown", ev => { dragFrom = stepAt(ev); ev.preventDefault(); });
  svg.addEventListener("mousemove", ev => {
    if (dragFrom === null) return;
    const a = px(Math.max(x0, Math.min(dragFrom, stepAt(ev)))), b = px(Math.min(x1, Math.max(dragFrom, stepAt(ev))));
    band.setAttribute("x", a); band.setAttribute("width", Math.max(0, b - a)); band.setAttribute("visibility", "visible");
  });
  svg.addEventListener("mouseup", ev => {
    if (dragFrom === null) return;
    const a = Math.max(x0, Math.min(dragFrom, stepAt(ev))), b = Math.min(x1, Math.max(dragFrom, stepAt(ev)));
    dragFrom = null;
    band.setAttribute("visibility", "hidden");
    if (px(b) - px(a) < 4) return; // a click, not a drag
    zoomTo([Math.floor(a), Math.ceil(b)]);
  });
  svg.addEventListener("dblclick", () => zoomTo(null));
  return box;
}

function zoomTo(range) {
  runsState.range = range;
  saveURL();
  drawZoom();
  refreshSeries();
}

function drawZoom() {
  const z = document.getElementById("zoom");
  if (!z) return;
  const r = runsState.range;
  if (!r) { z.replaceChildren(el("span", {class: "muted"}, "drag across a chart to zoom")); return; }
  const reset = el("button", {type: "button", id: "zoom-reset"}, "every step");
  reset.addEventListener("click", () => zoomTo(null));
  z.replaceChildren(`steps ${r[0]}–${r[1]} `, reset);
}

// runsSkeleton makes the runs page's two parts once: the run list, redrawn
// as runs change, and the metrics section, whose controls persist.
function runsSkeleton() {
  if (document.getElementById("runs-top")) return;
  const st = runsState;
  const controls = el("div", {class: "controls"});
  const smooth = el("input", {type: "range", min: 0, max: 0.99, step: 0.01, value: st.smooth, id: "smooth"});
  const smoothLab = el("span", {}, String(st.smooth));
  smooth.addEventListener("input", () => { smoothLab.textContent = smooth.value; });
  smooth.addEventListener("change", () => { st.smooth = Number(smooth.value); saveURL(); refreshSeries(); });
  const logBox = el("input", {type: "checkbox", id: "log", checked: st.log});
  logBox.addEventListener("change", () => { st.log = logBox.checked; saveURL(); drawCharts(); });
  const filter = el("input", {type: "search", placeholder: "filter metrics", value: st.filter, id: "filter"});
  filter.addEventListener("input", () => { st.filter = filter.value; drawCharts(); });
  controls.append(el("label", {}, "smoothing ", smooth, " ", smoothLab), el("label", {}, logBox, " log scale"), filter, el("span", {id: "zoom"}));
  const metrics = el("section", {id: "runs-metrics"}, el("h2", {}, "Metrics"), controls, el("div", {id: "legend", class: "legend"}),
    el("div", {id: "charts", class: "charts"}), el("h2", {}, "Recipe differences"), el("div", {id: "diff"}));
  main.replaceChildren(el("div", {id: "runs-top"}), metrics);
  drawZoom();
}

function drawRuns() {
  const st = runsState, out = [];
  const list = st.list;
  if (!list) { main.replaceChildren(st.error ? banner(st.error) : el("p", {class: "muted"}, "Loading runs…")); return; }
  runsSkeleton();
  if (st.error) out.push(banner(st.error));
  out.push(el("p", {class: "muted"}, `${list.runs.length} run${list.runs.length === 1 ? "" : "s"} in ${list.roots.join(", ") || "no folder"}. Tick runs to chart them; several are overlaid.`));
  const known = new Set(list.runs.map(r => r.id));
  const t = el("table", {id: "runs"}, el("tr", {}, ...["", "run", "status", "step", "ETA", "rows", "metrics written", "recipe", "folder"].map(h => el("th", {}, h))));
  for (const r of list.runs) {
    const box = el("input", {type: "checkbox", "data-run": r.id, checked: st.selected.includes(r.id)});
    box.addEventListener("change", () => {
      st.selected = box.checked ? [...st.selected, r.id] : st.selected.filter(x => x !== r.id);
      saveURL(); refreshSeries();
    });
    const step = r.planned ? `${r.step} / ${r.planned}` : String(r.step);
    t.append(el("tr", {"data-run": r.id, "data-status": r.status}, el("td", {}, box), el("td", {}, r.name), el("td", {}, stateBadge(r.status)),
      el("td", {}, step), el("td", {}, r.eta_s !== undefined ? fmtDur(r.eta_s) : "–"), el("td", {}, r.rows),
      el("td", {}, r.modified ? new Date(r.modified).toLocaleString() : "–"), el("td", {class: "wrap source"}, r.source || "–"), el("td", {class: "muted"}, r.id)));
    if (r.problems && r.problems.length) t.append(el("tr", {}, el("td", {}), el("td", {colspan: 8, class: "problems"}, r.problems.join(" · "))));
  }
  out.push(t);
  for (const id of st.selected) if (!known.has(id)) out.push(banner(`Run ${id} is no longer there (deleted or moved): untick it or reload.`));
  document.getElementById("runs-top").replaceChildren(...out);
  document.getElementById("runs-metrics").hidden = st.selected.length === 0;
  stamp();
}

function drawCharts() {
  const charts = document.getElementById("charts"), legend = document.getElementById("legend");
  if (!charts || !runsState.series) return;
  const runs = runsState.series.runs;
  legend.replaceChildren(...runs.map((r, i) => el("span", {}, el("i", {style: `background:${palette[i % palette.length]}`}), r.name + (r.error ? " — " + r.error : ""))));
  const names = new Set();
  for (const r of runs) for (const k of Object.keys(r.metrics)) names.add(k);
  const f = runsState.filter.toLowerCase();
  const order = [...names].filter(k => k.toLowerCase().includes(f)).sort((a, b) => {
    const ia = preferred.indexOf(a), ib = preferred.indexOf(b);
    if (ia >= 0 || ib >= 0) return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib);
    return a < b ? -1 : 1;
  });
  charts.replaceChildren(...order.map(k => chart(k, runs)));
  main.dataset.chartsDrawnMs = String(Math.round(performance.now())); // since navigation: what the page-load benchmark reads
  if (order.length === 0) charts.append(el("p", {class: "muted"}, runs.some(r => r.rows > 0) ? "No metric matches." : "No metrics yet."));
}

function drawDiff() {
  const box = document.getElementById("diff");
  if (!box) return;
  const d = runsState.diff;
  if (runsState.selected.length < 2) { box.replaceChildren(el("p", {class: "muted"}, "Tick two runs or more to compare their recipes.")); return; }
  if (!d) return;
  if (d.error) { box.replaceChildren(banner(d.error)); return; }
  if (d.rows.length === 0) { box.replaceChildren(el("p", {class: "muted"}, "The recipes are the same.")); return; }
  const names = d.runs.map(id => { const r = (runsState.list.runs || []).find(x => x.id === id); return r ? r.name : id; });
  const t = el("table", {class: "diff"}, el("tr", {}, el("th", {}, "setting"), ...names.map(n => el("th", {}, n))));
  for (const row of d.rows) t.append(el("tr", {}, el("td", {}, row.path), ...row.values.map(v => el("td", {}, v))));
  box.replaceChildren(t);
}

let seriesSeq = 0;
async function refreshSeries() {
  const st = runsState, seq = ++seriesSeq;
  if (st.selected.length === 0) { st.series = null; st.diff = null; drawRuns(); drawCharts(); drawDiff(); return; }
  const q = new URLSearchParams();
  for (const r of st.selected) q.append("run", r);
  q.set("points", "400");
  q.set("smooth", String(st.smooth));
  if (st.range) { q.set("from", String(st.range[0])); q.set("to", String(st.range[1])); }
  try {
    const series = await getJSON("/api/series?" + q);
    const diff = st.selected.length > 1 ? await getJSON("/api/diff?" + q) : null;
    if (seq !== seriesSeq) return;
    st.series = series; st.diff = diff; st.error = "";
  } catch (e) {
    st.error = String(e.message || e);
  }
  drawRuns();
  drawCharts();
  drawDiff();
}

function runsPage() {
  let first = true;
  every(5000, async () => {
    let changed = first;
    try {
      const list = await getJSON("/api/runs");
      changed = changed || runsState.error !== "" || JSON.stringify(list) !== JSON.stringify(runsState.list);
      runsState.list = list;
      runsState.error = "";
    } catch (e) {
      runsState.error = "Cannot list the runs: " + (e.message || e);
      changed = true;
    }
    const live = (runsState.list ? runsState.list.runs : []).some(r => runsState.selected.includes(r.id) && (r.status === "running" || r.status === "writing"));
    if (first || live) { first = false; await refreshSeries(); } else if (changed) drawRuns();
  });
}

// ---- Traces ----

const traceFields = ["store", "since", "until", "agent", "model", "run", "tool", "trace", "reward", "min_reward", "max_reward"];

// toInput turns an RFC 3339 time into a datetime-local value (local time).
function toInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const p = n => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}
function fmtMS(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1) return v === 0 ? "0" : v.toFixed(2) + " ms";
  if (v < 1000) return Math.round(v) + " ms";
  return fmtNum(v / 1000) + " s";
}
function rewardText(rw) {
  if (!rw) return "";
  if (Array.isArray(rw)) return rw.map(r => `${r.name} ${fmtNum(r.value)}`).join(", ");
  return Object.keys(rw).sort().map(k => `${k} ${fmtNum(rw[k])}`).join(", ");
}
function pager(total, offset, limit, go, labels) {
  const box = el("div", {class: "controls pager"});
  const prev = el("button", {type: "button", disabled: offset <= 0}, labels[0]);
  const next = el("button", {type: "button", disabled: offset + limit >= total}, labels[1]);
  prev.addEventListener("click", () => go(Math.max(0, offset - limit)));
  next.addEventListener("click", () => go(offset + limit));
  box.append(prev, el("span", {class: "muted"}, total === 0 ? "none" : `${offset + 1}–${Math.min(total, offset + limit)} of ${total}`), next);
  return box;
}

function tracesPage() {
  const q = new URLSearchParams(location.search);
  const form = el("form", {id: "trace-filter", class: "controls"});
  const inputs = {};
  const field = (name, label, attrs) => {
    const i = el("input", Object.assign({name, id: "f-" + name}, attrs || {}));
    inputs[name] = i;
    form.append(el("label", {}, label + " ", i));
  };
  const storeSel = el("select", {name: "store", id: "f-store"}, el("option", {value: ""}, "every store"));
  if (q.get("store")) { storeSel.append(el("option", {value: q.get("store")}, q.get("store"))); storeSel.value = q.get("store"); }
  inputs.store = storeSel;
  form.append(el("label", {}, "store ", storeSel));
  field("since", "from", {type: "datetime-local"});
  field("until", "to", {type: "datetime-local"});
  for (const [n, l] of [["agent", "agent"], ["model", "model"], ["run", "run"], ["tool", "tool"], ["trace", "trace id"]]) field(n, l, {type: "search", size: 12});
  field("reward", "reward", {type: "search", size: 8, placeholder: "all"});
  field("min_reward", "≥", {type: "number", step: "any", size: 6});
  field("max_reward", "≤", {type: "number", step: "any", size: 6});
  form.append(el("button", {type: "submit"}, "search"));
  for (const n of traceFields) {
    const v = q.get(n) || "";
    if (n === "since" || n === "until") inputs[n].value = toInput(v); else if (n !== "store") inputs[n].value = v;
  }
  main.replaceChildren(el("h2", {}, "Traces"), form, el("section", {id: "trace-tree"}), el("div", {id: "trace-results"}), el("div", {id: "trace-stats"}));
  let offset = Number(q.get("offset") || 0), opened = q.get("open") ? [q.get("in") || "", q.get("open")] : null;

  const params = () => {
    const p = new URLSearchParams();
    for (const n of traceFields) {
      let v = inputs[n].value.trim();
      if (!v) continue;
      if (n === "since" || n === "until") { const d = new Date(v); if (Number.isNaN(d.getTime())) continue; v = d.toISOString(); }
      p.set(n, v);
    }
    return p;
  };
  const saveTraceURL = () => {
    const p = params();
    if (offset > 0) p.set("offset", String(offset));
    if (opened) { p.set("in", opened[0]); p.set("open", opened[1]); }
    history.replaceState(null, "", "/traces" + (p.toString() ? "?" + p : ""));
  };
  const search = async () => {
    const p = params();
    p.set("offset", String(offset));
    p.set("limit", "50");
    const box = document.getElementById("trace-results");
    let res;
    try { res = await getJSON("/api/traces?" + p); } catch (e) { box.replaceChildren(banner(String(e.message || e))); return; }
    const want = storeSel.value;
    storeSel.replaceChildren(el("option", {value: ""}, "every store"), ...res.stores.map(s => el("option", {value: s.id}, s.run ? `${s.name} (${s.id})` : s.id)));
    if (want && !res.stores.some(s => s.id === want)) storeSel.append(el("option", {value: want}, want + " (not found)"));
    storeSel.value = want;
    const out = [];
    for (const e of res.errors || []) out.push(banner(e));
    if (res.stores.length === 0) out.push(el("div", {class: "note"}, "No trace store: runs record their episodes in DIR/traces (found under the --runs folders), and rlnode dashboard --traces DIR shows another store."));
    if ((res.skipped || []).length) out.push(el("p", {class: "problems"}, "Not read: " + res.skipped.join(" · ")));
    out.push(el("p", {class: "muted"}, `${res.total} trace${res.total === 1 ? "" : "s"} in ${res.searched.length} store${res.searched.length === 1 ? "" : "s"}, newest first. Click one to open it.`));
    const t = el("table", {id: "traces"}, el("tr", {}, ...["start", "trace", "root span", "spans", "duration", "agents", "models", "tools", "rewards", "errors"].map(h => el("th", {}, h))));
    for (const r of res.traces) {
      const row = el("tr", {"data-trace": r.id, "data-store": r.store, class: "clickable" + (r.errors ? " failed" : "")},
        el("td", {}, new Date(r.start).toLocaleString()), el("td", {class: "mono"}, r.id.slice(0, 12)), el("td", {}, r.name), el("td", {}, r.spans),
        el("td", {}, fmtMS(r.duration_ms)), el("td", {}, (r.agents || []).join(", ")), el("td", {}, (r.models || []).join(", ")),
        el("td", {}, (r.tools || []).join(", ")), el("td", {}, rewardText(r.rewards)), el("td", {}, r.errors || ""));
      row.addEventListener("click", () => { opened = [r.store, r.id]; saveTraceURL(); openTrace(); });
      t.append(row);
    }
    out.push(t, pager(res.total, res.offset, 50, o => { offset = o; saveTraceURL(); search(); }, ["newer", "older"]));
    box.replaceChildren(...out);
    drawStats(res.stats || {});
    stamp();
  };
  const drawStats = stats => {
    const out = [el("h2", {}, "Stats of the matching traces")];
    for (const [by, label] of [["agent", "per agent (or source)"], ["tool", "per tool"], ["model", "per model"]]) {
      const rows = stats[by] || [];
      out.push(el("h3", {}, label));
      if (rows.length === 0) { out.push(el("p", {class: "muted"}, "None.")); continue; }
      const t = el("table", {id: "stats-" + by}, el("tr", {}, ...[by, "spans", "errors", "input tokens", "output tokens", "p50", "p90", "p99", "rewards", "mean reward"].map(h => el("th", {}, h))));
      for (const s of rows) t.append(el("tr", {"data-key": s.key}, el("td", {}, s.key), el("td", {}, s.calls), el("td", {}, s.errors), el("td", {}, s.input_tokens),
        el("td", {}, s.output_tokens), el("td", {}, fmtMS(s.p50_ms)), el("td", {}, fmtMS(s.p90_ms)), el("td", {}, fmtMS(s.p99_ms)), el("td", {}, s.rewards), el("td", {}, s.rewards ? fmtNum(s.reward_mean) : "–")));
      out.push(t);
    }
    document.getElementById("trace-stats").replaceChildren(...out);
  };
  const openTrace = async () => {
    const box = document.getElementById("trace-tree");
    if (!opened) { box.replaceChildren(); return; }
    let v;
    try { v = await getJSON(`/api/trace?store=${encodeURIComponent(opened[0])}&id=${encodeURIComponent(opened[1])}`); } catch (e) { box.replaceChildren(banner(String(e.message || e))); return; }
    if (v.error) { box.replaceChildren(banner(v.error)); return; }
    box.replaceChildren(el("h2", {}, "Trace " + v.id), el("p", {class: "muted"}, `started ${new Date(v.start).toLocaleString()} · ${v.spans.length} spans` + (v.truncated ? ` (${v.truncated} more not shown)` : "") + ` · ${v.store}`), spanTree(v.spans));
    box.scrollIntoView();
  };
  form.addEventListener("submit", ev => { ev.preventDefault(); offset = 0; saveTraceURL(); search(); });
  search();
  openTrace();
}

// spanTree draws spans as a tree (children under their parent, in start
// order) with a bar for each span's time within the trace.
function spanTree(spans) {
  const ids = new Set(spans.map(s => s.id)), kids = new Map();
  for (const s of spans) {
    const p = s.parent && ids.has(s.parent) ? s.parent : "";
    if (!kids.has(p)) kids.set(p, []);
    kids.get(p).push(s);
  }
  const end = Math.max(1e-9, ...spans.map(s => s.start_ms + s.duration_ms));
  const t = el("table", {id: "spans", class: "tree"}, el("tr", {}, ...["span", "timeline", "duration", "status", "model / tool", "tokens in/out", "rewards"].map(h => el("th", {}, h))));
  const seen = new Set();
  const walk = (s, depth) => {
    if (seen.has(s.id)) return;
    seen.add(s.id);
    const bar = el("span", {class: "wf"}, el("i", {style: `left:${(100 * s.start_ms / end).toFixed(2)}%;width:${Math.max(0.5, 100 * s.duration_ms / end).toFixed(2)}%`}));
    const what = [s.model, s.tool].filter(Boolean).join(" · ");
    const tok = s.input_tokens !== undefined || s.output_tokens !== undefined ? `${s.input_tokens ?? "–"} / ${s.output_tokens ?? "–"}` : "";
    const row = el("tr", {"data-span": s.id, "data-depth": depth, "data-parent": s.parent || "", class: "clickable" + (s.status === "error" ? " failed" : "")},
      el("td", {style: `padding-left:${8 + 18 * depth}px`}, (kids.has(s.id) ? "▾ " : "· ") + s.name), el("td", {}, bar), el("td", s.end_shared ? {title: "the engine did not say when this call finished: its batch's time"} : {}, fmtMS(s.duration_ms) + (s.end_shared ? " (batch)" : "")),
      el("td", {}, s.status), el("td", {}, what), el("td", {}, tok), el("td", {class: "wrap"}, rewardText(s.rewards)));
    const detail = el("tr", {class: "detail", hidden: true}, el("td", {colspan: 7}, spanDetail(s)));
    row.addEventListener("click", () => { detail.hidden = !detail.hidden; });
    t.append(row, detail);
    for (const k of kids.get(s.id) || []) walk(k, depth + 1);
  };
  for (const r of kids.get("") || []) walk(r, 0);
  return t;
}

function spanDetail(s) {
  const dl = el("dl", {class: "kv"});
  const add = (k, v) => { if (v !== undefined && v !== null && v !== "" && !(Array.isArray(v) && v.length === 0)) dl.append(el("dt", {}, k), el("dd", {}, String(v))); };
  add("operation", s.operation); add("agent", s.agent); add("provider", s.provider); add("run", s.run); add("step", s.step); add("episode", s.episode);
  add("turn", s.turn); add("policy", s.policy); add("weight version", s.weight_version); add("conversation", s.conversation);
  add("started", `+${fmtMS(s.start_ms)}`); add("finish", (s.finish_reasons || []).join(", ")); add("error", [s.error_type, s.status_message].filter(Boolean).join(": "));
  add("prompt token ids", s.prompt_token_ids || "");
  for (const r of s.rewards || []) add("reward " + r.name, fmtNum(r.value) + (r.reason ? " — " + r.reason : ""));
  add("input", s.input); add("output", s.output); add("tool arguments", s.tool_arguments); add("tool result", s.tool_result); add("attributes", s.attributes);
  return dl;
}

// ---- Episodes ----

function episodesPage() {
  const q = new URLSearchParams(location.search);
  const st = {run: q.get("run") || "", step: q.get("step") || "", offset: Number(q.get("offset") || 0)};
  const runSel = el("select", {id: "ep-run"}), stepSel = el("select", {id: "ep-step"});
  main.replaceChildren(el("h2", {}, "Episodes"), el("div", {class: "controls"}, el("label", {}, "run ", runSel), el("label", {}, "step ", stepSel)), el("div", {id: "episodes"}));
  const save = () => {
    const p = new URLSearchParams();
    if (st.run) p.set("run", st.run);
    if (st.step) p.set("step", st.step);
    if (st.offset) p.set("offset", String(st.offset));
    history.replaceState(null, "", "/episodes" + (p.toString() ? "?" + p : ""));
  };
  runSel.addEventListener("change", () => { st.run = runSel.value; st.step = ""; st.offset = 0; save(); load(); });
  stepSel.addEventListener("change", () => { st.step = stepSel.value; st.offset = 0; save(); load(); });
  const load = async () => {
    const box = document.getElementById("episodes");
    let stores;
    try { stores = (await getJSON("/api/stores")).stores.filter(s => s.run); } catch (e) { box.replaceChildren(banner(String(e.message || e))); return; }
    runSel.replaceChildren(...stores.map(s => el("option", {value: s.run}, `${s.name} (${s.run})`)));
    if (!st.run && stores.length) st.run = stores[0].run;
    if (st.run && !stores.some(s => s.run === st.run)) runSel.prepend(el("option", {value: st.run}, st.run));
    runSel.value = st.run;
    if (!st.run) { box.replaceChildren(el("div", {class: "note"}, "No run with recorded episodes under the --runs folders: rlnode run records them in DIR/traces unless started with --traces off.")); stepSel.replaceChildren(); return; }
    const p = new URLSearchParams({run: st.run, offset: String(st.offset), limit: "20"});
    if (st.step) p.set("step", st.step);
    let page;
    try { page = await getJSON("/api/episodes?" + p); } catch (e) { box.replaceChildren(banner(String(e.message || e))); return; }
    stepSel.replaceChildren(el("option", {value: ""}, "every step"), ...page.steps.map(s => el("option", {value: String(s)}, String(s))));
    stepSel.value = st.step;
    const out = [];
    if (page.error) out.push(banner(page.error));
    if ((page.skipped || []).length) out.push(el("p", {class: "problems"}, "Not read: " + page.skipped.join(" · ")));
    out.push(el("p", {class: "muted"}, `${page.total} episode${page.total === 1 ? "" : "s"}` + (st.step ? ` at step ${st.step}` : ` over ${page.steps.length} steps`) + ` recorded in ${page.store}.`));
    for (const e of page.episodes) out.push(episodeCard(page.store, e));
    out.push(pager(page.total, page.offset, 20, o => { st.offset = o; save(); load(); }, ["previous", "next"]));
    box.replaceChildren(...out);
    stamp();
  };
  load();
}

function episodeCard(store, e) {
  const open = el("a", {href: `/traces?store=${encodeURIComponent(store)}&in=${encodeURIComponent(store)}&open=${e.trace}`, class: "open-trace"}, "open as a trace");
  const head = el("div", {class: "ep-head"}, el("b", {}, `step ${e.step} · group ${e.group}`), " ", el("span", {class: "muted mono"}, e.id), " ",
    el("span", {class: "verdict " + e.verdict}, e.verdict), " ", e.final !== undefined ? `verifier score ${fmtNum(e.final)}` : "", " · ", open);
  const card = el("div", {class: "episode", "data-episode": e.id, "data-trace": e.trace, "data-verdict": e.verdict}, head);
  for (const t of e.turns) {
    const prompt = t.prompt ? el("pre", {}, t.prompt)
      : el("div", {class: "muted"}, `${t.prompt_tokens} prompt tokens (no prompt text recorded): ` + (t.prompt_ids || []).join(" ") + (t.prompt_tokens > (t.prompt_ids || []).length ? " …" : ""));
    card.append(el("div", {class: "turn", "data-turn": t.turn},
      el("div", {class: "muted"}, `turn ${t.turn}` + (t.weight_version !== undefined ? ` · weights v${t.weight_version}` : "") + ` · ${t.output_tokens} tokens out` + (t.finish_reason ? ` · ${t.finish_reason}` : "") + (t.status === "error" ? " · error" : "")),
      el("div", {class: "label"}, "prompt"), prompt,
      el("div", {class: "label"}, "response"), el("pre", {}, t.response || "(empty)"),
      ...(t.tools || []).map(c => el("div", {class: "tool"}, el("span", {class: "label"}, "tool "), el("span", {class: "mono"}, `${c.name}(${c.arguments || ""})`),
        c.error ? el("span", {class: "feedback"}, " — error: " + c.error) : null, c.result ? el("pre", {}, c.result) : null)),
      el("div", {}, el("span", {class: "label"}, "reward "), t.reward !== undefined ? fmtNum(t.reward) : "–", t.feedback ? el("span", {class: "feedback"}, " — " + t.feedback) : null)));
  }
  return card;
}

// ---- Router ----

const page = location.pathname.replace(/\/+$/, "").split("/")[1] || "cluster";
for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === page);
clearTimeout(timer);
({cluster: clusterPage, runs: runsPage, traces: tracesPage, episodes: episodesPage}[page] || clusterPage)();
