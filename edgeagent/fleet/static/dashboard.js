// edgeagent dashboard: renders the server-sent fleet stream. Everything from the cluster is set with
// textContent or setAttribute (never innerHTML), so a name or message holding markup shows as text.
"use strict";

const STATES = [
  ["u", "up to date"], ["g", "upgrading"], ["w", "waiting for its wave"],
  ["h", "held"], ["s", "stopped"], ["o", "offline"], ["f", "failed"],
];
const STATE_NAMES = new Map(STATES);
const MAX_EVENTS = 50;

const cells = new Map();      // node -> cell element (only for nodes whose cell was ever shown)
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

// Each state is a chip: pressed chips narrow the grid to their states (none pressed: every state).
function buildLegend() {
  const legend = document.getElementById("legend");
  for (const [code, name] of STATES) {
    const li = el("li", "s-" + code);
    li.id = "legend-" + code;
    const chip = el("button", "chip");
    chip.type = "button";
    chip.id = "chip-" + code;
    chip.setAttribute("data-state", code);
    chip.setAttribute("aria-pressed", "false");
    chip.append(name + " ");
    const b = el("b", null, "0");
    b.id = "count-" + code;
    chip.append(b);
    li.append(chip);
    legend.append(li);
  }
}

function showCounts() {
  for (const [code] of STATES) document.getElementById("count-" + code).textContent = String(counts.get(code));
  const filtering = view.q.trim() !== "" || view.states.size > 0;
  document.getElementById("node-count").textContent =
    "(" + states.size + (filtering ? ", " + shown + " shown" : "") + ")";
}

// --------------------------------------------------------------------------------------- the filter
// What the text box accepts: words, each a part of the node's name, and key=value, a label the node has
// (key!=value: a label it has not). Every word must hold; case is ignored. The chips add "in one of these
// states". The filter, the chips and the grouping live in the URL's #fragment, so a link shares the view.

const view = {q: "", states: new Set(), group: ""};
const labelsOf = new Map();   // node -> its labels (shared objects: most nodes share a few label sets)
let waves = {};               // namespace/name -> [[nodes of wave 1], [wave 2], ...]
let shown = 0;                // cells the filter lets through

function parseQuery(q) {
  const words = [], labels = [];
  for (const raw of q.trim().split(/\s+/)) {
    if (!raw) continue;
    const ne = raw.indexOf("!="), eq = raw.indexOf("=");
    if (ne > 0) labels.push([raw.slice(0, ne), raw.slice(ne + 2), false]);
    else if (eq > 0) labels.push([raw.slice(0, eq), raw.slice(eq + 1), true]);
    else words.push(raw.toLowerCase());
  }
  return {words, labels};
}

// The filter as a pure function of (query, pressed states): (node, state code, its labels) -> shown?
function compileFilter(q, states) {
  const {words, labels} = parseQuery(q);
  return (node, code, mine) => {
    if (states.size && !states.has(code)) return false;
    const name = node.toLowerCase();
    for (const w of words) if (!name.includes(w)) return false;
    for (const [k, v, want] of labels) if (((mine || {})[k] === v) !== want) return false;
    return true;
  };
}
window.compileFilter = compileFilter;  // for the tests

function matcher() {
  const test = compileFilter(view.q, view.states);
  return (node, code) => test(node, code, labelsOf.get(node));
}

function readURL() {
  const params = new URLSearchParams(location.hash.slice(1));
  view.q = params.get("q") || "";
  view.states = new Set((params.get("s") || "").split("").filter(c => STATE_NAMES.has(c)));
  view.group = params.get("g") || "";
  document.getElementById("filter").value = view.q;
  for (const [code] of STATES) {
    document.getElementById("chip-" + code).setAttribute("aria-pressed", String(view.states.has(code)));
  }
}

function writeURL() {
  const params = new URLSearchParams();
  if (view.q) params.set("q", view.q);
  if (view.states.size) params.set("s", STATES.map(([c]) => c).filter(c => view.states.has(c)).join(""));
  if (view.group) params.set("g", view.group);
  const hash = params.toString();
  history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
}

// The filter rebuilds the grid from the matching cells only (cells are kept and reused): a rejected cell is
// not in the page at all, so a keystroke at 10,000 nodes costs one pass over the nodes and the layout of the
// chunks on screen, and no group keeps the room of cells it no longer shows.
function applyFilter() {
  const ok = matcher();
  let same = true;
  for (const [node, code] of states) {
    if (ok(node, code) !== matched.has(node)) { same = false; break; }
  }
  if (same && renderedGroup === view.group) { showCounts(); return; }  // a keystroke that changes nothing
  renderGroups();
}

// ---------------------------------------------------------------------------------------- grouping
// The grid is grouped (none, by the waves of a rolling plan, or by a label such as the plan's group label),
// each group a collapsible section headed by its counts. Cells go in chunks that the browser lays out only
// when on screen (content-visibility), so 10,000 labelled cells paint fast.

const CHUNK = 200;
const collapsed = new Set();  // group titles the operator folded
const matched = new Set();    // nodes the filter lets through (their cells are in the page)
let groupOf = () => "";
let renderedGroup = null;     // the grouping the grid was last rendered with
let headsDirty = false;

function grouping() {
  const g = view.group;
  if (g.startsWith("wave:")) {
    const byNode = new Map();
    (waves[g.slice(5)] || []).forEach((nodes, i) => { for (const n of nodes) byNode.set(n, i + 1); });
    return {order: t => t === "not in the plan" ? Infinity : Number(t.slice(5)),
      of: node => byNode.has(node) ? "wave " + byNode.get(node) : "not in the plan"};
  }
  if (g.startsWith("label:")) {
    const key = g.slice(6);
    const none = "no " + key + " label";
    return {order: t => t === none ? [1] : [0, ...naturalKey(t)],
      of: node => { const v = (labelsOf.get(node) || {})[key]; return v === undefined ? none : key + "=" + v; }};
  }
  return {order: () => 0, of: () => "all nodes"};
}

function naturalKey(s) {
  return s.split(/(\d+)/).map((p, i) => i % 2 ? Number(p) : p);
}

function compareKeys(a, b) {
  const x = Array.isArray(a) ? a : [a], y = Array.isArray(b) ? b : [b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] === y[i]) continue;
    if (typeof x[i] === typeof y[i]) return x[i] < y[i] ? -1 : 1;
    return typeof x[i] === "number" ? -1 : 1;
  }
  return x.length - y.length;
}

// A node's cell, built the first time its chunk comes near the screen (at 10,000 nodes most never are).
function cellOf(node) {
  let cell = cells.get(node);
  if (!cell) { cell = makeCell(node, states.get(node)); cells.set(node, cell); }
  return cell;
}

// Two attributes and the name per cell. The tooltip is set on hover.
function makeCell(node, code) {
  const cell = document.createElement("div");
  cell.className = "cell s-" + code + (node === selected ? " selected" : "");
  cell.setAttribute("data-node", node);
  cell.setAttribute("data-state", code);
  cell.textContent = node;
  return cell;
}

function groupSection(title, nodes) {
  const section = el("section", "group" + (collapsed.has(title) ? " collapsed" : ""));
  section.setAttribute("data-group", title);
  const head = el("h3", "group-head");
  const toggle = el("button", "toggle", title);
  toggle.type = "button";
  toggle.setAttribute("aria-expanded", String(!collapsed.has(title)));
  head.append(toggle, el("span", "group-counts"));
  const body = el("div", "group-cells");
  for (let i = 0; i < nodes.length; i += CHUNK) {
    const chunk = el("div", "chunk");
    chunk.nodes = nodes.slice(i, i + CHUNK);
    body.append(chunk);
    if (filledEarly < EARLY_CELLS) { filledEarly += chunk.nodes.length; fillChunk(chunk); } else placeholder(chunk);
  }
  section.append(head, body);
  return section;
}

// Only the chunks near the screen hold their cells: the first EARLY_CELLS at once, the others when they
// come within half a screen of the viewport, standing in until then for the room their cells will take. So a
// render (the first paint, a filter keystroke that widens the grid) puts a few hundred cells in the page,
// not 10,000.
const EARLY_CELLS = 400;
let filledEarly = 0;
let gridColumns = 1;  // the grid's columns as laid out before this render (a placeholder's height)
const nearScreen = "IntersectionObserver" in window ? new IntersectionObserver(entries => {
  for (const e of entries) if (e.isIntersecting) fillChunk(e.target);
}, {rootMargin: "50% 0px"}) : null;

function fillChunk(chunk) {
  if (!chunk.nodes) return;
  for (const node of chunk.nodes) if (states.has(node)) chunk.append(cellOf(node));
  chunk.nodes = null;
  chunk.style.height = "";
  if (nearScreen) nearScreen.unobserve(chunk);
}

function placeholder(chunk) {
  if (!nearScreen) { fillChunk(chunk); return; }
  const rows = Math.ceil(chunk.nodes.length / gridColumns);
  chunk.style.height = (rows * 18) + "px";
  nearScreen.observe(chunk);
}

// The whole grid again, matching cells only: after the snapshot, a filter change, a node added, a label or a
// plan's waves changed, a new grouping. A group the filter empties is left out.
function renderGroups() {
  const g = grouping();
  const ok = matcher();
  const filtering = view.q.trim() !== "" || view.states.size > 0;
  groupOf = g.of;
  renderedGroup = view.group;
  matched.clear();
  const groups = new Map();
  for (const [node, code] of states) {
    const title = g.of(node);
    if (!groups.has(title)) groups.set(title, []);
    if (ok(node, code)) { matched.add(node); groups.get(title).push(node); }
  }
  shown = matched.size;
  const titles = [...groups.keys()].sort((a, b) => compareKeys(g.order(a), g.order(b)));
  const grid = document.getElementById("grid");
  // Read before the grid is emptied: read after, it would force a layout in the middle of the render.
  gridColumns = Math.max(1, Math.floor(((grid.clientWidth || 1200) + 2) / (6.5 * 16 + 2)));
  if (nearScreen) nearScreen.disconnect();
  grid.replaceChildren();  // cells are moved out of a detached tree: far cheaper than one by one from the page
  filledEarly = 0;
  const frag = document.createDocumentFragment();
  for (const title of titles) {
    if (filtering && groups.get(title).length === 0) continue;
    frag.append(groupSection(title, groups.get(title)));
  }
  grid.replaceChildren(frag);
  grid.classList.toggle("roomy", states.size <= 400);
  showCounts();
  refreshHeads();
}

function markHeads() {
  if (headsDirty) return;
  headsDirty = true;
  requestAnimationFrame(refreshHeads);
}

// Each group's head: its nodes, how many the filter shows, and its nodes per state (worst first).
function refreshHeads() {
  headsDirty = false;
  const tallies = new Map();
  for (const [node, code] of states) {
    const title = groupOf(node);
    let t = tallies.get(title);
    if (!t) { t = {total: 0, shown: 0, by: new Map()}; tallies.set(title, t); }
    t.total++;
    if (matched.has(node)) t.shown++;
    t.by.set(code, (t.by.get(code) || 0) + 1);
  }
  for (const section of document.getElementById("grid").children) {
    const t = tallies.get(section.getAttribute("data-group")) || {total: 0, shown: 0, by: new Map()};
    const parts = [t.total + (t.total === 1 ? " node" : " nodes") + (t.shown !== t.total ? ", " + t.shown + " shown" : "")];
    for (const [code, name] of [...STATES].reverse()) if (t.by.get(code)) parts.push(t.by.get(code) + " " + name);
    section.firstElementChild.lastElementChild.textContent = parts.join(" · ");
  }
}

function renderGrid(nodes, labelSets) {
  cells.clear(); states.clear(); labelsOf.clear();
  for (const [code] of STATES) counts.set(code, 0);
  for (const [node, code, li] of nodes) {
    states.set(node, code);
    labelsOf.set(node, (labelSets || [])[li] || {});
    counts.set(code, counts.get(code) + 1);
  }
  renderGroups();
  updateGroupChoices();
  requestAnimationFrame(() => requestAnimationFrame(() => {
    document.body.setAttribute("data-rendered", String(states.size));
    window.gridRenderedAt = performance.now();
  }));
}

let regroupPending = false;
function regroupSoon() {
  if (regroupPending) return;
  regroupPending = true;
  requestAnimationFrame(() => { regroupPending = false; renderGroups(); });
}

function setNode(node, code) {
  const before = states.get(node);
  if (before !== undefined) counts.set(before, counts.get(before) - 1);
  if (code === null) {
    const cell = cells.get(node);
    if (cell) cell.remove();
    cells.delete(node); states.delete(node); labelsOf.delete(node);
    if (matched.delete(node)) shown--;
  } else {
    const isNew = before === undefined;
    states.set(node, code);
    const cell = cells.get(node);  // built when its chunk first came near the screen
    if (cell) {
      cell.className = "cell s-" + code + (node === selected ? " selected" : "");
      cell.setAttribute("data-state", code);
      cell.removeAttribute("title");
    }
    counts.set(code, counts.get(code) + 1);
    const visible = matcher()(node, code);
    if (isNew || visible !== matched.has(node)) {
      // Its place among the others (and its group) is found by a full render, at most once a frame; a cell
      // the filter now rejects leaves at once.
      if (!visible) { if (cell) cell.remove(); matched.delete(node); shown--; }
      regroupSoon();
    }
  }
  showCounts();
  markHeads();
  window.fleetChanges.push([node, code, Date.now()]);
  if (window.fleetChanges.length > 10000) window.fleetChanges.splice(0, 5000);
  if (node === selected) loadDetails(node);
}

function setLabels(node, labels) {
  labelsOf.set(node, labels);
  regroupSoon();  // its group, or whether the filter takes it, may have changed
  updateGroupChoices();
}

// The grouping menu: no grouping; the waves of each rolling plan; the plan's group label and every other
// label key whose value differs between nodes.
function updateGroupChoices() {
  const select = document.getElementById("group");
  const choices = [["", "no grouping"]];
  for (const key of Object.keys(waves).sort()) choices.push(["wave:" + key, "waves of " + key]);
  const planLabels = new Set([...rollouts.values()].map(r => r.summary && r.summary.g).filter(Boolean));
  const values = new Map();
  for (const labels of new Set(labelsOf.values())) {
    for (const [k, v] of Object.entries(labels)) {
      if (!values.has(k)) values.set(k, new Set());
      values.get(k).add(v);
    }
  }
  for (const k of planLabels) choices.push(["label:" + k, "label " + k + " (the plan's groups)"]);
  for (const k of [...values.keys()].sort()) {
    if (!planLabels.has(k) && values.get(k).size > 1) choices.push(["label:" + k, "label " + k]);
  }
  if (view.group && !choices.some(([v]) => v === view.group)) choices.push([view.group, view.group]);
  const signature = JSON.stringify(choices);
  if (select.getAttribute("data-choices") !== signature) {
    select.setAttribute("data-choices", signature);
    select.replaceChildren(...choices.map(([v, t]) => { const o = el("option", null, t); o.value = v; return o; }));
  }
  select.value = view.group;
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
    versions: el("div", "versions"), verdict: el("div", "verdict"),
  };
  title.append(parts.name, parts.facts);
  parts.bar.append(parts.reached, parts.done);
  parts.bar.setAttribute("role", "progressbar");
  parts.verdict.setAttribute("role", "status");
  card.append(title, parts.versions, parts.verdict, parts.bar, parts.counts);
  if (TOKEN) {
    parts.actions = actionButtons();
    parts.answer = parts.actions.lastElementChild;
    card.append(parts.actions);
  }
  document.getElementById("rollouts").append(card);
  r = {card, parts, summary: null, at: 0};
  rollouts.set(key, r);
  return r;
}

// A revision as a person knows it: its hash and its images.
function version(s, hash) {
  if (!hash) return "?";
  const images = (s.i || {})[hash];
  return hash + (images ? " (" + images + ")" : "");
}

// What went wrong, named: the revision that failed (with its images) and the nodes the rollout counted
// failed; after a rollback, the revision the nodes went back to. Empty when nothing did.
function verdict(s) {
  const failed = s.fc ? " failed on " + s.fc + (s.fc === 1 ? " node" : " nodes") + " (" +
    s.f.map(([node, why]) => node + ": " + why).join("; ") + (s.fc > s.f.length ? "; …" : "") + ")" : "";
  if (s.p === "RolledBack") {
    return "Rolled back: revision " + version(s, s.pr) + (failed || " failed") + "; nodes back on revision " +
      version(s, s.sr || s.r) + ".";
  }
  if (s.p === "Aborted") return "Aborted: revision " + version(s, s.pr || s.r) + " is rolled no further" +
    (failed ? ";" + failed : "") + ".";
  if (failed) return "Revision " + version(s, s.pr || s.r) + failed + ".";
  return "";
}

// A summary, compact on the wire: k namespace/name, m model, r revision, u up to date, d desired, w wave,
// n waves, p phase, b bake left (s), z paused, a nodes in the waves reached, s counts in STATES order,
// i images by revision hash, pr the plan's revision, sr its stable revision, fc/f its failed nodes
// (count, the first few [node, reason]), g the plan's group label, pl 1 when it has a RolloutPlan.
function renderRollout(r) {
  const s = r.summary, p = r.parts;
  const desired = Math.max(1, s.d);
  const waiting = s.s[2];
  const reached = s.a !== null ? s.a : s.d - waiting;
  const donePct = Math.round(1000 * s.u / desired) / 10;
  const reachedPct = Math.round(1000 * Math.max(reached, s.u) / desired) / 10;
  p.name.textContent = s.k;
  const facts = [s.m,
    s.w !== null && s.n !== null ? "wave " + s.w + "/" + s.n : "no rollout plan", "phase " + s.p];
  if (s.b !== null) facts.push("bake left " + duration(s.b - (Date.now() / 1000 - r.at)));
  if (s.z) facts.push("paused");
  p.facts.textContent = facts.join(" · ");
  const versions = ["revision " + version(s, s.r)];
  if (s.sr && s.sr !== s.r) versions.push("stable " + version(s, s.sr));
  if (s.pr && s.pr !== s.r && s.p !== "RolledBack") versions.push("rolling " + version(s, s.pr));
  p.versions.textContent = versions.join(" · ");
  const said = verdict(s);
  p.verdict.textContent = said;
  p.verdict.hidden = !said;
  r.card.classList.toggle("bad", s.p === "RolledBack" || s.p === "Aborted" || s.fc > 0);
  r.card.setAttribute("data-phase", s.p);
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
  if (p.actions) p.actions.hidden = !s.pl;  // only a DaemonSet with a RolloutPlan can be steered
}

// ------------------------------------------------------------------------------------------ actions
// Started with `edgeagent dashboard --allow-actions`, the page carries a token (a meta tag, empty otherwise)
// and each rollout with a plan gets promote, pause, resume and abort buttons. A press is one POST carrying
// the token, which the server turns into the CLI verb's own write with the user's credentials; its answer
// (the CLI's line, or why it was refused: the API server's 403, a request still pending) is shown as text.

const TOKEN = (document.querySelector('meta[name="edgeagent-token"]') || {}).content || "";
const ACTIONS = [
  ["promote", "end the current wave's bake and start the next wave (edgeagent rollout promote)"],
  ["pause", "no pod moves and no wave starts until resumed (edgeagent rollout pause)"],
  ["resume", "let a paused rollout go on (edgeagent rollout resume)"],
  ["abort", "stop the rollout; with onFailure Rollback the stable revision is restored (edgeagent rollout abort)"],
];

function actionButtons() {
  const box = el("div", "actions");
  for (const [verb, what] of ACTIONS) {
    const button = el("button", null, verb);
    button.type = "button";
    button.title = what;
    button.setAttribute("data-verb", verb);
    box.append(button);
  }
  const answer = el("output", "answer");
  answer.setAttribute("aria-live", "polite");
  box.append(answer);
  return box;
}

async function steer(key, verb) {
  const r = rollouts.get(key);
  if (!r) return;
  if (verb === "abort" && !window.confirm("Abort the rollout of " + key + "?")) return;
  const buttons = r.parts.actions.querySelectorAll("button");
  for (const b of buttons) b.disabled = true;
  const answer = r.parts.answer;
  answer.className = "answer";
  answer.removeAttribute("data-status");
  answer.textContent = verb + "…";
  let text, status = 0;
  try {
    const [namespace, name] = key.split("/");
    const resp = await fetch("/api/actions/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name) +
      "/" + verb, {method: "POST", headers: {"X-Edgeagent-Token": TOKEN}, cache: "no-store"});
    status = resp.status;
    text = (await resp.text()).trim() || (resp.status + " " + resp.statusText);
  } catch (e) {
    text = "the dashboard did not answer: " + e.message;
  }
  answer.textContent = text;  // the CLI's line or the refusal, as text (it quotes the API server's words)
  answer.classList.add(status === 200 ? "done" : "refused");
  answer.setAttribute("data-status", String(status));
  for (const b of buttons) b.disabled = false;
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
  updateGroupChoices();
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
    rows.push([key, (v.pod ? (v.revision || "?") + (v.images ? " (" + v.images + ")" : "") +
      (v.current ? "" : " (older revision)") : "no pod") + ", " +
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
  const known = states.size > 0 || rollouts.size > 0;
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
    waves = s.waves || {};
    renderGrid(s.nodes, s.labels);
    if (selected) select(states.has(selected) ? selected : null);
  });
  on("n", ([node, code]) => setNode(node, code));
  on("nl", ([node, labels]) => setLabels(node, labels));
  on("waves", w => {
    waves = w;
    updateGroupChoices();
    if (view.group.startsWith("wave:")) regroupSoon();
  });
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

// For the benchmark and the tests: each filter change, from the input event to the frame that shows it.
window.filterTimings = [];

function filterChanged(startedAt) {
  writeURL();
  applyFilter();
  const applied = performance.now();
  requestAnimationFrame(() => requestAnimationFrame(() => {
    window.filterTimings.push({start: startedAt, applied, painted: performance.now(), shown});
  }));
}

document.addEventListener("DOMContentLoaded", () => {
  buildLegend();
  readURL();
  document.getElementById("filter").addEventListener("input", e => {
    view.q = e.target.value;
    filterChanged(e.timeStamp);
  });
  document.getElementById("legend").addEventListener("click", e => {
    const chip = e.target.closest && e.target.closest(".chip");
    if (!chip) return;
    const code = chip.getAttribute("data-state");
    if (view.states.has(code)) view.states.delete(code); else view.states.add(code);
    chip.setAttribute("aria-pressed", String(view.states.has(code)));
    filterChanged(e.timeStamp);
  });
  document.getElementById("group").addEventListener("change", e => {
    view.group = e.target.value;
    writeURL();
    renderGroups();
  });
  window.addEventListener("hashchange", () => {
    readURL();
    updateGroupChoices();
    renderGroups();
  });
  document.getElementById("grid").addEventListener("mouseover", e => {
    const node = e.target.getAttribute && e.target.getAttribute("data-node");
    if (node && !e.target.hasAttribute("title")) {
      e.target.setAttribute("title", node + ": " + STATE_NAMES.get(states.get(node)));
    }
  });
  document.getElementById("grid").addEventListener("click", e => {
    const node = e.target.getAttribute && e.target.getAttribute("data-node");
    if (node) select(node);
    const toggle = e.target.closest && e.target.closest(".toggle");
    if (toggle) {
      const section = toggle.closest(".group");
      const title = section.getAttribute("data-group");
      if (collapsed.has(title)) collapsed.delete(title); else collapsed.add(title);
      section.classList.toggle("collapsed", collapsed.has(title));
      toggle.setAttribute("aria-expanded", String(!collapsed.has(title)));
    }
  });
  document.getElementById("details-close").addEventListener("click", () => select(null));
  document.getElementById("rollouts").addEventListener("click", e => {
    const button = e.target.closest && e.target.closest(".actions button");
    if (button) steer(button.closest(".rollout").getAttribute("data-daemonset"), button.getAttribute("data-verb"));
  });
  connect();
  setInterval(tick, 1000);
});
