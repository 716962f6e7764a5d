// edgeagent dashboard: renders the server-sent fleet stream. Everything from the cluster is set with
// textContent or setAttribute (never innerHTML), so a name or message holding markup shows as text.
"use strict";

const STATES = [
  ["u", "up to date"], ["g", "upgrading"], ["w", "waiting for its wave"],
  ["h", "held"], ["s", "stopped"], ["o", "offline"], ["f", "failed"],
];
const STATE_NAMES = new Map(STATES);
const MAX_EVENTS = 50;

const cells = new Map();      // node -> cell element
const states = new Map();     // node -> state code
const counts = new Map(STATES.map(([c]) => [c, 0]));
const rollouts = new Map();   // namespace/name -> {card, parts, summary, at}
let selected = null;
// For tests and the benchmark: when the grid was last rendered and each cell change (node, code, ms).
window.fleetChanges = [];

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function age(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "-";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 120) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 180) return m + "m";
  const h = Math.floor(s / 3600);
  if (h < 48) return h + "h";
  return Math.floor(h / 24) + "d";
}

// A time left (a wave's bake), as every view prints one: the port of edgeagent.durations.format_duration
// (shortest exact d/h/m/s form, whole seconds; the browser test checks both agree).
const DURATION_UNITS = [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];
function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "-";
  let rest = Math.max(0, Math.round(seconds));
  if (rest === 0) return "0s";
  let text = "";
  for (const [unit, size] of DURATION_UNITS) {
    const count = Math.floor(rest / size);
    rest -= count * size;
    if (count) text += count + unit;
  }
  return text;
}

// Epoch seconds (Events on the stream) or RFC 3339 (node details, as `fleet -o json` writes them).
function since(when) {
  const epoch = typeof when === "string" ? Date.parse(when) / 1000 : when;
  return epoch ? age(Date.now() / 1000 - epoch) : "-";
}

// ------------------------------------------------------------------------------------------- legend

function buildLegend() {
  const legend = document.getElementById("legend");
  for (const [code, name] of STATES) {
    const li = el("li", "s-" + code);
    li.id = "legend-" + code;
    li.append(name + " ");
    const b = el("b", null, "0");
    b.id = "count-" + code;
    li.append(b);
    legend.append(li);
  }
}

function showCounts() {
  for (const [code] of STATES) document.getElementById("count-" + code).textContent = String(counts.get(code));
  document.getElementById("node-count").textContent = "(" + cells.size + ")";
}

// --------------------------------------------------------------------------------------------- grid

// Two attributes per cell and nothing else: 10,000 of them are built at once. The tooltip is set on hover.
function makeCell(node, code) {
  const cell = document.createElement("div");
  cell.className = "cell s-" + code;
  cell.setAttribute("data-node", node);
  cell.setAttribute("data-state", code);
  return cell;
}

function renderGrid(nodes) {
  const grid = document.getElementById("grid");
  cells.clear(); states.clear();
  for (const [code] of STATES) counts.set(code, 0);
  const frag = document.createDocumentFragment();
  for (const [node, code] of nodes) {
    const cell = makeCell(node, code);
    cells.set(node, cell); states.set(node, code);
    counts.set(code, counts.get(code) + 1);
    frag.append(cell);
  }
  grid.replaceChildren(frag);
  grid.classList.toggle("roomy", cells.size <= 400);
  showCounts();
  requestAnimationFrame(() => requestAnimationFrame(() => {
    document.body.setAttribute("data-rendered", String(cells.size));
    window.gridRenderedAt = performance.now();
  }));
}

function setNode(node, code) {
  const before = states.get(node);
  if (before !== undefined) counts.set(before, counts.get(before) - 1);
  if (code === null) {
    const cell = cells.get(node);
    if (cell) cell.remove();
    cells.delete(node); states.delete(node);
  } else {
    let cell = cells.get(node);
    if (!cell) {
      cell = makeCell(node, code);
      cells.set(node, cell);
      document.getElementById("grid").append(cell);
    }
    cell.className = "cell s-" + code + (node === selected ? " selected" : "");
    cell.setAttribute("data-state", code);
    cell.removeAttribute("title");
    states.set(node, code);
    counts.set(code, counts.get(code) + 1);
  }
  showCounts();
  window.fleetChanges.push([node, code, Date.now()]);
  if (window.fleetChanges.length > 10000) window.fleetChanges.splice(0, 5000);
  if (node === selected) loadDetails(node);
}

// ----------------------------------------------------------------------------------------- rollouts

function rolloutCard(key) {
  let r = rollouts.get(key);
  if (r) return r;
  const card = el("div", "rollout");
  card.setAttribute("data-daemonset", key);
  const title = el("div", "title");
  const parts = {
    name: el("span", "name"), facts: el("span", "facts"), bar: el("div", "bar"),
    reached: el("div", "reached"), done: el("div", "done"), counts: el("div", "counts"),
  };
  title.append(parts.name, parts.facts);
  parts.bar.append(parts.reached, parts.done);
  parts.bar.setAttribute("role", "progressbar");
  card.append(title, parts.bar, parts.counts);
  document.getElementById("rollouts").append(card);
  r = {card, parts, summary: null, at: 0};
  rollouts.set(key, r);
  return r;
}

// A summary, compact on the wire: k namespace/name, m model, r revision, u up to date, d desired, w wave,
// n waves, p phase, b bake left (s), z paused, a nodes in the waves reached, s counts in STATES order.
function renderRollout(r) {
  const s = r.summary, p = r.parts;
  const desired = Math.max(1, s.d);
  const waiting = s.s[2];
  const reached = s.a !== null ? s.a : s.d - waiting;
  const donePct = Math.round(1000 * s.u / desired) / 10;
  const reachedPct = Math.round(1000 * Math.max(reached, s.u) / desired) / 10;
  p.name.textContent = s.k;
  const facts = [s.m, "revision " + (s.r || "?"),
    s.w !== null && s.n !== null ? "wave " + s.w + "/" + s.n : "no rollout plan", "phase " + s.p];
  if (s.b !== null) facts.push("bake left " + duration(s.b - (Date.now() / 1000 - r.at)));
  if (s.z) facts.push("paused");
  p.facts.textContent = facts.join(" · ");
  p.done.style.width = donePct + "%";
  p.reached.style.width = reachedPct + "%";
  p.bar.setAttribute("data-done", String(donePct));
  p.bar.setAttribute("data-reached", String(reachedPct));
  p.bar.setAttribute("aria-valuenow", String(donePct));
  p.bar.setAttribute("title", s.u + " of " + s.d + " up to date; " + reached + " in the waves reached");
  p.counts.replaceChildren(...[
    s.u + "/" + s.d + " up to date",
    ...STATES.slice(1).map(([, name], i) => s.s[i + 1] + " " + name),
  ].map(t => el("span", null, t)));
}

function setRollouts(list, replace) {
  if (replace) {
    for (const r of rollouts.values()) r.card.remove();
    rollouts.clear();
  }
  for (const s of list) {
    const r = rolloutCard(s.k);
    r.summary = s; r.at = Date.now() / 1000;
    renderRollout(r);
  }
  document.getElementById("no-daemonsets").hidden = rollouts.size > 0;
}

function dropRollouts(keys) {
  for (const key of keys) {
    const r = rollouts.get(key);
    if (r) { r.card.remove(); rollouts.delete(key); }
  }
  document.getElementById("no-daemonsets").hidden = rollouts.size > 0;
}

// ------------------------------------------------------------------------------------------- events

function eventRow(ev) {
  const tr = el("tr", ev.type === "Warning" ? "warning" : "");
  tr.setAttribute("data-time", String(ev.time));
  for (const text of [since(ev.time), ev.type, ev.reason, ev.object,
    ev.component + (ev.node ? ", " + ev.node : ""), ev.message]) tr.append(el("td", null, text));
  return tr;
}

function setEvents(list) {
  const newest = [...list].sort((a, b) => b.time - a.time).slice(0, MAX_EVENTS);
  document.getElementById("events").replaceChildren(...newest.map(eventRow));
}

// Newest first, at most MAX_EVENTS: an Event that arrives late (a relist) goes where its time puts it.
function addEvent(ev) {
  const body = document.getElementById("events");
  const row = eventRow(ev);
  const after = Array.from(body.children).find(tr => Number(tr.getAttribute("data-time")) < ev.time);
  if (after) body.insertBefore(row, after); else body.append(row);
  while (body.children.length > MAX_EVENTS) body.lastElementChild.remove();
}

// ------------------------------------------------------------------------------------------ details

async function loadDetails(node) {
  const panel = document.getElementById("details");
  let d;
  try {
    const resp = await fetch("/api/nodes/" + encodeURIComponent(node));
    if (!resp.ok) { panel.hidden = true; return; }
    d = await resp.json();
  } catch (e) { return; }
  if (node !== selected) return;
  document.getElementById("details-name").textContent = d.node;
  const dl = document.getElementById("details-fields");
  const rows = [
    ["State", d.state + (d.why ? " (" + d.why + ")" : "")], ["Ready", d.ready],
    ["Held", d.held ? d.held.reason + ": " + d.held.message :
      d.policy === "open" ? "no" : "unknown (no agent reported a policy)"],
    ["Next window", d.nextWindow || (d.held ? "-" : d.policy === "open" ? "open now" : "unknown")],
    ["Last seen", d.lastSeen ? since(d.lastSeen) + " ago" : "-"],
  ];
  for (const [key, v] of Object.entries(d.daemonsets)) {
    rows.push([key, (v.pod ? (v.revision || "?") + (v.current ? "" : " (older revision)") : "no pod") + ", " +
      v.state + (v.why ? " (" + v.why + ")" : "")]);
  }
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", null, k), el("dd", null, v)]));
  const outcomes = document.getElementById("details-outcomes");
  outcomes.replaceChildren(...(d.outcomes.length ? d.outcomes.map(o =>
    el("li", null, since(o.time) + " ago " + o.reason + " " + o.namespace + "/" + o.pod + ": " + o.message)) :
    [el("li", "muted", "none reported")]));
  panel.hidden = false;
}

function select(node) {
  if (selected && cells.get(selected)) cells.get(selected).classList.remove("selected");
  selected = node;
  if (node && cells.get(node)) cells.get(node).classList.add("selected");
  if (node) loadDetails(node); else document.getElementById("details").hidden = true;
}

// ------------------------------------------------------------------------------------------- health

let staleSince = null;  // when the page last knew the fleet to be current (the link broke after it)

function setHealth(h) {
  const link = document.getElementById("link");
  const label = {ok: "live", connecting: "connecting…", unreachable: "API server unreachable",
    refused: "credentials refused", forbidden: "not allowed to read the fleet",
    lost: "dashboard unreachable, retrying…"}[h.state] || h.state;
  link.textContent = label + (h.server ? " · " + h.server : "");
  link.className = "link " + h.state;
  const problem = document.getElementById("problem");
  const bad = h.state === "unreachable" || h.state === "refused" || h.state === "forbidden";
  problem.hidden = !bad;
  // The last known fleet stays on screen, marked stale, rather than a blank page: during an outage an
  // operator still needs to see which nodes were where.
  const known = cells.size > 0 || rollouts.size > 0;
  const stale = (bad || h.state === "lost") && known;
  if (stale && staleSince === null) staleSince = new Date();
  if (!stale) staleSince = null;
  document.getElementById("main").hidden = bad && !known;
  document.getElementById("main").classList.toggle("stale", stale);
  const banner = document.getElementById("stale");
  banner.hidden = !stale;
  if (stale) {
    banner.textContent = "Stale: the fleet as last seen at " + staleSince.toLocaleTimeString() +
      "; it is not updated until the link is back.";
  }
  document.body.setAttribute("data-health", h.state);
  document.body.setAttribute("data-stale", String(stale));
  if (bad) {
    document.getElementById("problem-title").textContent = {
      refused: "The API server refused the dashboard's credentials",
      forbidden: "Your credentials may not read the fleet: a permission is missing",
    }[h.state] || "The API server cannot be reached";
    document.getElementById("problem-text").textContent = h.problem || "";
    document.getElementById("problem-check").replaceChildren(...(h.check || []).map(t => el("li", null, t)));
  }
}

// ------------------------------------------------------------------------------------------- stream

function connect() {
  const source = new EventSource("/api/stream");
  const on = (name, fn) => source.addEventListener(name, e => fn(JSON.parse(e.data)));
  on("snapshot", s => {
    setHealth(s.health);
    setRollouts(s.daemonsets, true);
    setEvents(s.events);
    renderGrid(s.nodes);
    if (selected) select(cells.has(selected) ? selected : null);
  });
  on("n", ([node, code]) => setNode(node, code));
  on("ds", list => setRollouts(list, false));
  on("dsgone", dropRollouts);
  on("ev", addEvent);
  on("health", setHealth);
  source.onerror = () => {
    if (source.readyState !== EventSource.OPEN) setHealth({state: "lost"});
  };
}

function tick() {
  for (const r of rollouts.values()) if (r.summary && r.summary.b !== null) renderRollout(r);
  for (const tr of document.getElementById("events").children) {
    tr.firstElementChild.textContent = since(Number(tr.getAttribute("data-time")));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  buildLegend();
  document.getElementById("grid").addEventListener("mouseover", e => {
    const node = e.target.getAttribute && e.target.getAttribute("data-node");
    if (node && !e.target.hasAttribute("title")) {
      e.target.setAttribute("title", node + ": " + STATE_NAMES.get(states.get(node)));
    }
  });
  document.getElementById("grid").addEventListener("click", e => {
    const node = e.target.getAttribute && e.target.getAttribute("data-node");
    if (node) select(node);
  });
  document.getElementById("details-close").addEventListener("click", () => select(null));
  connect();
  setInterval(tick, 1000);
});
