// The extauthz console: polls /console/data and draws it. No library, no request elsewhere.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
let paused = false;
let timer = 0;
const cards = new Map(); // resource -> card element, kept so that keyboard focus survives updates
const hotCards = new Map(); // rule index -> card element

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fmtTime(s) {
  if (!s) return "never";
  const d = new Date(s);
  return d.toLocaleString();
}

function resourceName(r) {
  if (r === "other") return "other (resources past the cap, or named by no rule)";
  if (r === "") return "no rule applied";
  return r;
}

function sum(a) { return a ? a.reduce((x, y) => x + y, 0) : 0; }

function chart(allowed, blocked) {
  const w = 300, h = 70;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const top = Math.max(1, ...allowed, ...blocked);
  svg.setAttribute("role", "img");
  const span = allowed.length >= 120 ? `${Math.round(allowed.length / 60)} minutes` : `${allowed.length} seconds`;
  svg.setAttribute("aria-label",
    `Per second over ${span}: allowed peak ${Math.max(0, ...allowed)}, blocked peak ${Math.max(0, ...blocked)}`);
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("class", "axis");
  axis.setAttribute("x1", 0); axis.setAttribute("x2", w);
  axis.setAttribute("y1", h - 1); axis.setAttribute("y2", h - 1);
  svg.append(axis);
  for (const [cls, series] of [["allowed", allowed], ["blocked", blocked]]) {
    const n = series.length;
    const pts = series.map((v, i) => `${(i * w / Math.max(1, n - 1)).toFixed(1)},${(h - 2 - v * (h - 6) / top).toFixed(1)}`);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("vector-effect", "non-scaling-stroke");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
}

function num(cls, value, unit, key) {
  return el("span", { class: "num " + cls, "data-key": key }, el("b", {}, value), el("span", {}, unit));
}

function ruleLine(ref, isTop) {
  const li = el("li", { class: isTop ? "top" : null, "data-rule": `${ref.kind}#${ref.index}` },
    el("span", {}, isTop ? "★ " : "", `${ref.kind} #${ref.index} ${ref.label} `,
      ref.shadow ? el("span", { class: "badge shadow" }, "shadow") : null),
    el("span", { class: "n", title: ref.recent ? "in the rule's own recent window" : "in the last 5 minutes" },
      `${ref.blocks} ${ref.shadow ? "would block" : "blocked"}${ref.recent ? " (recent)" : ""}`));
  return li;
}

function fillResource(card, r) {
  const t = r.totals || { OK: 0, Shadow: 0, Authority: 0, ParamFlow: 0, Invalid: 0, Other: 0 };
  const allowedNow = r.allowed ? r.allowed[r.allowed.length - 2] || 0 : 0;
  const blockedNow = r.blocked ? r.blocked[r.blocked.length - 2] || 0 : 0;
  const allowed = t.OK + t.Shadow, blocked = t.Authority + t.ParamFlow + t.Invalid;
  const parts = [["ok", t.OK], ["shadow", t.Shadow], ["authority", t.Authority], ["param_flow", t.ParamFlow],
    ["invalid", t.Invalid], ["other", t.Other]];
  const breakdown = el("p", { class: "breakdown" });
  for (const [name, v] of parts) {
    breakdown.append(el("span", { "data-result": name, "data-count": v, class: v ? null : "zero" }, `${name} ${v}`), " ");
  }
  const children = [
    el("h3", {}, resourceName(r.resource)),
    el("div", { class: "nums" },
      num("allowed", allowedNow, "/s allowed", "allowed-now"),
      num("blocked", blockedNow, "/s blocked", "blocked-now")),
    el("div", { class: "nums five" },
      el("span", { class: "lbl" }, "last 5 min:"),
      num("", allowed, "allowed", "allowed-total"),
      num("", blocked, "blocked", "blocked-total")),
    r.allowed ? chart(r.allowed, r.blocked) : el("p", { class: "empty" }, "no traffic counted for it yet"),
    breakdown,
  ];
  if (r.rules.length) {
    const ul = el("ul", { class: "rules", "aria-label": "Rules of this resource" });
    r.rules.forEach((ref, i) => ul.append(ruleLine(ref, i === r.top_rule)));
    children.push(ul);
  }
  card.replaceChildren(...children);
  card.setAttribute("aria-label", `${resourceName(r.resource)}: ${allowed} allowed, ${blocked} blocked in the last 5 minutes`);
}

function renderResources(list, more) {
  const grid = document.getElementById("resources");
  for (const c of [...grid.children]) if (!("resource" in c.dataset)) c.remove();
  const seen = new Set();
  list.forEach((r, i) => {
    let card = cards.get(r.resource);
    if (!card) {
      card = el("article", { class: "card", tabindex: 0, "data-resource": r.resource });
      cards.set(r.resource, card);
    }
    fillResource(card, r);
    if (grid.children[i] !== card) grid.insertBefore(card, grid.children[i] || null);
    seen.add(r.resource);
  });
  for (const [name, card] of cards) {
    if (!seen.has(name)) { card.remove(); cards.delete(name); }
  }
  if (!list.length) grid.replaceChildren(el("p", { class: "empty" }, "No rules and no traffic yet."));
  const m = document.getElementById("more");
  m.hidden = !more;
  m.textContent = more ? `${more} more resources named by the rules are not listed.` : "";
}

function known(v) { return v.remaining !== null && v.remaining !== undefined; }

// valueTable lists values with their counts, and their remaining tokens when the service
// knows them.
function valueTable(caption, values) {
  const withLeft = values.some(known);
  const body = el("tbody");
  for (const v of values) {
    body.append(el("tr", {},
      el("td", { class: "v" }, v.value),
      el("td", { class: "n" }, v.passed),
      el("td", { class: "n" }, v.blocked),
      withLeft ? el("td", { class: "n" }, known(v) ? v.remaining : "—") : null));
  }
  if (!values.length) body.append(el("tr", {}, el("td", { colspan: withLeft ? 4 : 3, class: "empty" }, "none")));
  return el("div", { class: "scroll" }, el("table", {},
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "value"), el("th", { scope: "col", class: "n" }, "passed"),
      el("th", { scope: "col", class: "n" }, "blocked"), withLeft ? el("th", { scope: "col", class: "n" }, "remaining") : null)),
    body));
}

function renderHot(list, quiet) {
  const q = document.getElementById("quiet");
  q.hidden = !quiet;
  q.textContent = quiet ? `${quiet} more hot-param rules counted no value in their recent window (or are past the list's cap).` : "";
  const grid = document.getElementById("hot");
  for (const c of [...grid.children]) if (!("hotRule" in c.dataset)) c.remove();
  const seen = new Set();
  list.forEach((h, i) => {
    let card = hotCards.get(h.rule);
    if (!card) {
      card = el("article", { class: "card", tabindex: 0, "data-hot-rule": h.rule });
      hotCards.set(h.rule, card);
    }
    card.dataset.resource = h.resource;
    card.setAttribute("aria-label", `param_flow rule ${h.rule}: ${h.resource}, ${h.param}`);
    card.replaceChildren(
      el("h3", {}, `${h.resource} · ${h.param} `, h.shadow ? el("span", { class: "badge shadow" }, "shadow") : null),
      el("p", { class: "note" }, `param_flow #${h.rule}`),
      el("div", { class: "pair" }, valueTable("Busiest by passed", h.by_passed), valueTable("Busiest by blocked", h.by_blocked)));
    if (grid.children[i] !== card) grid.insertBefore(card, grid.children[i] || null);
    seen.add(h.rule);
  });
  for (const [rule, card] of hotCards) {
    if (!seen.has(rule)) { card.remove(); hotCards.delete(rule); }
  }
  if (!list.length) grid.replaceChildren(el("p", { class: "empty" }, "No value counted recently."));
}

function describeParam(r) {
  let d = `${r.param}: ${r.grade} ${r.count}`;
  if (r.grade === "qps") d += ` per ${r.duration}` + (r.burst ? `, burst ${r.burst}` : "") + `, ${r.behavior}`;
  if (r.max_queueing_time) d += ` (max wait ${r.max_queueing_time})`;
  if (r.lease) d += `, lease ${r.lease}`;
  if (r.items) d += `, ${Object.keys(r.items).length} exception item(s)`;
  if (r.cluster) d += ", cluster";
  if (r.refund) d += ", refund";
  return d;
}

function renderRules(rules, more) {
  const body = document.querySelector("#rules tbody");
  const rows = [];
  rules.authority.forEach((r, i) => rows.push(el("tr", {},
    el("td", {}, "authority"), el("td", { class: "n" }, i), el("td", { class: "v" }, r.resource),
    el("td", {}, `${r.strategy} list: ${r.origins.join(", ") || "(none)"}; missing origin: ${r.missing_origin}`))));
  rules.param_flow.forEach((r, i) => rows.push(el("tr", {},
    el("td", {}, "param_flow"), el("td", { class: "n" }, i), el("td", { class: "v" }, r.resource),
    el("td", {}, describeParam(r), r.shadow ? " " : null, r.shadow ? el("span", { class: "badge shadow" }, "shadow") : null))));
  body.replaceChildren(...rows);
  document.getElementById("rules-caption").textContent =
    `Version ${rules.version}, ${rules.authority.length} authority and ${rules.param_flow.length} hot-param rules` +
    (more ? ` listed; ${more} more not listed (see /rules)` : "");
}

function renderAlerts(rules) {
  const box = document.getElementById("alerts");
  const parts = [];
  if (rules.last_error) {
    parts.push(el("div", { class: "alert error", role: "alert", id: "last-error" },
      el("h2", {}, "Last rejected load"),
      el("p", {}, `At ${fmtTime(rules.last_error.time)}; the rules in force stay.`),
      el("pre", {}, rules.last_error.message)));
  }
  if (rules.warnings.length) {
    const ul = el("ul", { id: "warnings" });
    for (const w of rules.warnings) ul.append(el("li", {}, w));
    parts.push(el("div", { class: "alert warn" }, el("h2", {}, "Load warnings"), ul));
  }
  box.replaceChildren(...parts);
  box.hidden = !parts.length;
}

function renderStore(s) {
  const box = document.getElementById("store");
  if (!s) { box.replaceChildren(el("span", { class: "empty" }, "Not available.")); return; }
  if (!s.enabled) { box.replaceChildren(el("span", {}, "No shared store: every rule keeps its state in this replica.")); return; }
  if (!s.calls && !s.breaker_open) {
    box.replaceChildren(el("span", {}, "No call to a shared store so far: none is configured, or no cluster rule has been used."));
    return;
  }
  const fb = Object.entries(s.fallbacks).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
  box.replaceChildren(
    el("span", { id: "breaker" }, "Breaker ", el("span", { class: "badge " + (s.breaker_open ? "open" : "closed") },
      s.breaker_open ? "open: calls suspended" : "closed")),
    el("span", {}, `Calls ${s.calls}`),
    el("span", {}, `Errors ${s.errors}`),
    el("span", { id: "fallbacks" }, `Fallbacks: ${fb}`));
}

function rate(v) { return v >= 10 ? Math.round(v).toString() : v.toFixed(1); }

// renderFleet shows every replica's counts and their sum, or says the view is this replica alone.
function renderFleet(v) {
  const note = document.getElementById("fleet-note");
  const box = document.getElementById("fleet");
  const n = v.replicas.length;
  if (!v.shared) {
    note.textContent = "Shows this replica only: no shared store (store.redis) is configured, so the replicas cannot see each other's counts.";
  } else if (v.error) {
    note.textContent = `Shows this replica only: ${v.error}`;
  } else {
    const end = new Date(v.end * 1000).toLocaleTimeString();
    note.textContent = `${n} replica${n === 1 ? "" : "s"} publishing to the shared store every ${v.interval_seconds} s; ` +
      `counts up to ${end}, the oldest of their last publications` +
      (v.more_replicas ? `; ${v.more_replicas} more replicas not listed` : "") +
      (v.unreadable ? `; ${v.unreadable} records could not be read` : "");
  }
  const t = v.total;
  const total = el("div", { class: "card", id: "fleet-total", "data-allowed": t.allowed_total, "data-blocked": t.blocked_total,
    "data-replicas": n, "aria-label": `Fleet of ${n}: ${t.allowed_total} allowed, ${t.blocked_total} blocked in the last minute` },
    el("h3", {}, n === 1 ? "This replica" : `All ${n} replicas`),
    el("div", { class: "nums" },
      num("allowed", rate(t.allowed_rate), "/s allowed", "fleet-allowed-rate"),
      num("blocked", rate(t.blocked_rate), "/s blocked", "fleet-blocked-rate")),
    el("div", { class: "nums five" }, el("span", { class: "lbl" }, "last minute:"),
      num("", t.allowed_total, "allowed", "fleet-allowed"), num("", t.blocked_total, "blocked", "fleet-blocked")),
    chart(t.allowed, t.blocked),
    t.resources.length ? el("p", { class: "breakdown" }, "Busiest: " +
      t.resources.slice(0, 5).map(r => `${resourceName(r.resource)} ${r.allowed}/${r.blocked}`).join(", ")) : null);
  const body = el("tbody");
  for (const r of v.replicas) {
    const c = r.counts;
    const age = Math.max(0, Math.round(new Date(v.time).getTime() / 1000 - 1 - r.end));
    body.append(el("tr", { "data-replica": r.id, "data-allowed": c.allowed_total, "data-blocked": c.blocked_total },
      el("td", { class: "v" }, r.id, r.self ? " " : null, r.self ? el("span", { class: "badge closed" }, "this replica") : null),
      el("td", { class: "v" }, r.admin),
      el("td", { class: "n" }, rate(c.allowed_rate)),
      el("td", { class: "n" }, rate(c.blocked_rate)),
      el("td", { class: "n" }, c.allowed_total),
      el("td", { class: "n" }, c.blocked_total),
      el("td", { class: "n" }, r.self ? "now" : `${age} s ago`)));
  }
  const table = el("div", { class: "scroll" }, el("table", { id: "replicas" },
    el("caption", {}, "Per replica: rates are the mean of the last 10 seconds, counts the last minute"),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col" }, "replica (host/pid)"), el("th", { scope: "col" }, "admin"),
      el("th", { scope: "col", class: "n" }, "allowed/s"), el("th", { scope: "col", class: "n" }, "blocked/s"),
      el("th", { scope: "col", class: "n" }, "allowed"), el("th", { scope: "col", class: "n" }, "blocked"),
      el("th", { scope: "col", class: "n" }, "published"))),
    body));
  box.replaceChildren(total, table);
}

async function pollFleet() {
  try {
    const resp = await fetch("/console/fleet", { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    renderFleet(await resp.json());
  } catch (e) {
    document.getElementById("fleet-note").textContent = `Cannot read the fleet view (${e.message}); retrying.`;
  }
}

function applyFilter() {
  const q = document.getElementById("filter").value.trim().toLowerCase();
  for (const card of document.querySelectorAll("[data-resource]")) {
    card.hidden = q !== "" && !card.dataset.resource.toLowerCase().includes(q);
  }
}

function render(d) {
  const r = d.rules;
  const count = r.authority.length + r.param_flow.length + d.more_rules;
  document.getElementById("summary").textContent =
    `Rules version ${r.version} · ${count} rules · loaded ${fmtTime(r.loaded_at)}` + (r.file ? ` from ${r.file}` : "");
  document.getElementById("window").textContent = Math.round(d.window_seconds / 60);
  renderAlerts(r);
  renderStore(d.store);
  renderResources(d.resources, d.more_resources);
  renderHot(d.hot, d.quiet_hot_rules);
  renderRules(r, d.more_rules);
  applyFilter();
  const live = document.getElementById("live");
  live.textContent = `Updated ${new Date(d.time).toLocaleTimeString()}`;
  live.dataset.time = d.time;
}

async function poll() {
  clearTimeout(timer);
  if (paused) return;
  // Problems go to an alert region, read out once; the time of each update is not.
  const problem = document.getElementById("problem");
  try {
    const resp = await fetch("/console/data", { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    render(await resp.json());
    if (problem.textContent) problem.textContent = "";
    await pollFleet();
  } catch (e) {
    const text = `Cannot reach the service (${e.message}); retrying.`;
    if (problem.textContent !== text) problem.textContent = text;
  }
  if (!paused) timer = setTimeout(poll, document.hidden ? POLL_MS * 5 : POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const pause = document.getElementById("pause");
  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) poll();
  });
  document.getElementById("filter").addEventListener("input", applyFilter);
  poll();
});
