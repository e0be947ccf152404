// crewlet operator UI (DESIGN.md "Operator UI"). No build step, no dependency, nothing from outside the node.
// Reads the token-guarded JSON routes of the node serving this page:
//   GET /fleet?inbox=true  (Nodes, Seats)   GET /turns?limit=50 (Turns)
//   GET /work?limit=100    (Work)           GET /events/trace/{id} (the trace view)
//   GET /agents/{handle}/memory (the Seats tab's Memory panel, AG-9)
// Every value is written with textContent or a DOM attribute, never parsed as markup.
"use strict";

const TOKEN_KEY = "crewlet.token"; // sessionStorage: asked once per tab, asked again on a 401
const GRAFANA_KEY = "crewlet.grafana"; // localStorage: the Grafana base URL for Tempo links (optional)
const REFRESH_MS = 2000;
const BAD_OUTCOMES = new Set(["blocked", "incomplete", "failed", "fenced"]); // shared/turns Outcome

const $ = (id) => document.getElementById(id);
let timer = null;
let generation = 0; // a refresh started for an older view does not paint over a newer one

// -- small DOM helpers --------------------------------------------------------------------------

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function cell(value, cls) {
  return el("td", value === undefined || value === null || value === "" ? "—" : value, cls);
}

function fillTable(id, rows, emptyText) {
  const body = $(id).querySelector("tbody");
  const out = document.createDocumentFragment();
  if (rows.length === 0) {
    const tr = el("tr", undefined, "empty");
    const td = el("td", emptyText);
    td.colSpan = $(id).querySelectorAll("thead th").length;
    tr.appendChild(td);
    out.appendChild(tr);
  }
  for (const r of rows) out.appendChild(r);
  body.replaceChildren(out);
}

function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : cell(c));
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, String(v));
  return tr;
}

function age(iso) {
  if (!iso) return null;
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return String(iso);
  const s = Math.max(0, (Date.now() - t) / 1000);
  return `${s.toFixed(1)} s ago`;
}

function clock(seconds) {
  if (seconds === undefined || seconds === null) return null;
  return new Date(Number(seconds) * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function labels(obj) {
  if (!obj || typeof obj !== "object") return "";
  return Object.keys(obj).sort().map((k) => `${k}=${obj[k]}`).join(", ");
}

// -- banner, token ------------------------------------------------------------------------------

function banner(text) {
  const b = $("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function askToken(message) {
  stop();
  sessionStorage.removeItem(TOKEN_KEY);
  banner(message || "");
  $("login").hidden = false;
  $("settings").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  $("token").value = "";
  $("token").focus();
}

class Refused extends Error {
  constructor(status, body) {
    const code = body && typeof body === "object" ? body.error || "" : "";
    let detail = body && typeof body === "object" ? body.detail : body;
    if (detail && typeof detail === "object") detail = detail.message || JSON.stringify(detail);
    super(`The API refused (${status}${code ? " " + code : ""})${detail ? ": " + detail : ""}`);
    this.status = status;
  }
}

async function api(path) {
  let r;
  try {
    r = await fetch(path, { headers: { Authorization: `Bearer ${token()}`, Accept: "application/json" } });
  } catch (e) {
    throw new Error(`The node is unreachable (${e.message || e}); retrying every ${REFRESH_MS / 1000} s`);
  }
  let body = null;
  try {
    body = await r.json();
  } catch (e) {
    body = null;
  }
  if (!r.ok) throw new Refused(r.status, body);
  return body;
}

// -- views --------------------------------------------------------------------------------------

async function showNodes() {
  const v = await api("/fleet");
  const nodes = v.nodes || [];
  fillTable(
    "nodes-table",
    nodes.map((n) =>
      row(
        [
          cell(n.id, "mono"),
          (n.roles || []).join(", "),
          labels(n.labels),
          n.broker,
          n.protocol,
          n.posture,
          n.config_epoch !== null && n.config_epoch !== undefined ? n.config_epoch : n.applied_epoch,
          n.config_error ? `${n.config_status}: ${n.config_error}` : n.config_status,
          n.seats_held,
          n.in_flight,
          age(n.renewed_at),
        ],
        { "data-node": n.id },
      ),
    ),
    "No live node (the lease bucket lists none).",
  );
  fillTable(
    "duties-table",
    (v.duties || []).map((d) => row([cell(d.duty, "mono"), d.node, d.epoch])),
    "No duty is held.",
  );
  const parts = [`${nodes.length} live node(s), asked ${v.asked}`, `config epoch ${v.config_epoch ?? "—"}`];
  if ((v.unmanned_roles || []).length) parts.push(`unmanned roles: ${v.unmanned_roles.join(", ")}`);
  if ((v.unowned_seats || []).length) parts.push(`unowned seats: ${v.unowned_seats.join(", ")}`);
  if ((v.unplaceable_seats || []).length)
    parts.push(`unplaceable seats: ${v.unplaceable_seats.map((s) => `${s.seat} (${s.selector})`).join(", ")}`);
  $("fleet-summary").textContent = parts.join(" · ");
}

let memorySeat = null; // the seat whose Memory panel is open (AG-9)

function memoryCell(seat) {
  const td = document.createElement("td");
  const b = el("button", "Memory", "memory-button");
  b.type = "button";
  b.setAttribute("data-memory", seat);
  b.addEventListener("click", () => {
    memorySeat = seat;
    refresh();
  });
  td.appendChild(b);
  return td;
}

async function showSeats() {
  const v = await api("/fleet?inbox=true");
  const inboxes = v.inboxes || {};
  const depth = (seat, key) => (inboxes[seat] ? inboxes[seat][key] : null);
  const rows = (v.seats || []).map((s) =>
    row(
      [
        cell(s.seat, "mono"), s.node, s.epoch, depth(s.seat, "pending"), depth(s.seat, "ack_pending"),
        age(s.renewed_at), memoryCell(s.seat),
      ],
      { "data-seat": s.seat, "data-owner": s.node },
    ),
  );
  for (const seat of v.unowned_seats || []) {
    rows.push(
      row(
        [cell(seat, "mono"), cell("unowned", "warn"), null, depth(seat, "pending"), depth(seat, "ack_pending"), null,
          memoryCell(seat)],
        { "data-seat": seat, "data-owner": "" },
      ),
    );
  }
  rows.sort((a, b) => a.getAttribute("data-seat").localeCompare(b.getAttribute("data-seat")));
  fillTable("seats-table", rows, "No seat.");
  if (memorySeat) await showMemory(memorySeat);
}

function written(r) {
  const t = r.created_at || r.ended_at || (r.written_at_us ? r.written_at_us / 1e6 : null);
  return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : null;
}

async function showMemory(seat) {
  // AG-9: the seat's diary (long, then short with expiry), its newest episodes; a section the node
  // could not read is named under the title
  const v = await api(`/agents/${encodeURIComponent(seat)}/memory`);
  $("memory-panel").hidden = false;
  $("memory-title").textContent = `Memory of ${v.handle}`;
  const pm = v.personal_memories || { long: [], short: [] };
  const errs = (v.errors || []).map((e) => `${e.section} unreadable`);
  $("memory-summary").textContent = [
    `${pm.long.length} long and ${pm.short.length} short diary entries`,
    `${(v.episodes || []).length} episodes`,
    `${(v.counterparty_profiles || []).length} counterparty profiles`,
    `${(v.synthesized_skills || []).length} skills`,
    ...errs,
  ].join(" · ");
  const rows = [
    ...pm.long.map((r) => row(["diary", written(r), r.retrieval_count ?? 0, r.content])),
    ...pm.short.map((r) => row([r.expired ? "diary (short, expired)" : "diary (short)", written(r), r.retrieval_count ?? 0, r.content])),
    ...(v.episodes || []).map((e) => row(["episode", written(e), null, `${e.work_key || ""}: ${e.task_summary || ""} → ${e.review_outcome || ""}`])),
  ];
  fillTable("memory-table", rows, "Nothing remembered yet.");
}

function grafanaLink(traceId) {
  const base = (localStorage.getItem(GRAFANA_KEY) || "").replace(/\/+$/, "");
  if (!base || !traceId) return null;
  // Grafana Explore on the provisioned Tempo data source (deploy/grafana: uid "tempo"), one TraceQL query.
  const panes = {
    t: {
      datasource: "tempo",
      queries: [{ refId: "A", datasource: { type: "tempo", uid: "tempo" }, queryType: "traceql", query: traceId }],
      range: { from: "now-24h", to: "now" },
    },
  };
  return `${base}/explore?schemaVersion=1&panes=${encodeURIComponent(JSON.stringify(panes))}`;
}

function traceCell(traceId) {
  const td = document.createElement("td");
  if (!traceId) {
    td.textContent = "—";
    return td;
  }
  const a = el("a", traceId.slice(0, 12) + "…", "mono trace-link");
  a.href = `#trace/${encodeURIComponent(traceId)}`;
  a.title = traceId;
  td.appendChild(a);
  const g = grafanaLink(traceId);
  if (g) {
    const ga = el("a", "Grafana", "grafana-link");
    ga.href = g;
    ga.target = "_blank";
    ga.rel = "noopener noreferrer";
    td.append(" ", ga);
  }
  return td;
}

function coverageText(c) {
  if (!c) return "";
  let t = `answered: ${(c.answered || []).join(", ") || "none"}`;
  if ((c.missing || []).length) t += ` · missing: ${c.missing.join(", ")} (partial)`;
  if ((c.other_version || []).length) t += ` · other version: ${c.other_version.join(", ")}`;
  return t;
}

async function showTurns() {
  const v = await api("/turns?limit=50");
  $("turns-coverage").textContent = coverageText(v.coverage);
  fillTable(
    "turns-table",
    (v.turns || []).map((t) => {
      const tok = t.tokens || {};
      const dur = t.ended_at && t.started_at ? `${(t.ended_at - t.started_at).toFixed(2)} s` : null;
      return row(
        [
          clock(t.started_at),
          cell(t.seat, "mono"),
          cell(t.outcome, BAD_OUTCOMES.has(t.outcome) ? "warn" : ""),
          `${tok.total ?? 0} (${tok.input ?? 0} in / ${tok.output ?? 0} out)`,
          dur,
          t.node,
          t.work_item,
          traceCell(t.trace_id),
        ],
        { "data-turn": t.turn_id, "data-seat": t.seat },
      );
    }),
    "No turn recorded yet.",
  );
}

function updated(v) {
  if (v === undefined || v === null) return null;
  return typeof v === "number" ? clock(v > 1e12 ? v / 1000 : v) : String(v);
}

async function showWork() {
  const v = await api("/work?limit=100");
  fillTable(
    "work-table",
    (v.items || []).map((w) =>
      row([cell(w.key, "mono"), w.title, w.status, w.assignee, updated(w.updated_at)], { "data-key": w.key }),
    ),
    "The tracker holds no work item.",
  );
}

async function showTrace(traceId) {
  $("trace-id").textContent = traceId;
  const g = grafanaLink(traceId);
  const ga = $("trace-grafana");
  ga.hidden = !g;
  if (g) ga.href = g;
  else ga.removeAttribute("href");
  const v = await api(`/events/trace/${encodeURIComponent(traceId)}`);
  $("trace-coverage").textContent = coverageText(v.coverage);
  fillTable(
    "trace-table",
    (v.events || []).map((e) =>
      row(
        [
          clock(Number(e.event_time) / 1e6),
          cell(e.event_type, "mono"),
          e.source,
          e.agent_id,
          e.node,
          cell(e.event_id, "mono"),
        ],
        { "data-event": e.event_id },
      ),
    ),
    "No event of this trace is in the event logs (yet).",
  );
}

// -- routing and refresh ------------------------------------------------------------------------

function route() {
  const h = decodeURIComponent(location.hash.replace(/^#/, ""));
  if (h.startsWith("trace/")) return { view: "trace", arg: h.slice(6) };
  if (["nodes", "seats", "turns", "work"].includes(h)) return { view: h, arg: null };
  return { view: "nodes", arg: null };
}

const SHOW = { nodes: showNodes, seats: showSeats, turns: showTurns, work: showWork, trace: showTrace };

function stop() {
  if (timer !== null) clearTimeout(timer);
  timer = null;
  generation += 1;
}

async function refresh() {
  const mine = generation;
  const { view, arg } = route();
  for (const a of document.querySelectorAll("#tabs a"))
    a.classList.toggle("active", a.getAttribute("data-tab") === (view === "trace" ? "turns" : view));
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== `view-${view}`;
  try {
    await SHOW[view](arg);
    if (mine !== generation) return;
    banner("");
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof Refused && e.status === 401) {
      askToken(`${e.message}. Enter a valid token.`);
      return;
    }
    banner(e.message || String(e));
    $("status").textContent = "stale";
  }
  if (mine === generation) timer = setTimeout(refresh, REFRESH_MS);
}

function start() {
  stop();
  $("login").hidden = true;
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    banner("");
    start();
  });
  $("signout").addEventListener("click", () => askToken("Token forgotten."));
  $("settings-button").addEventListener("click", () => {
    $("settings").hidden = !$("settings").hidden;
    $("grafana").value = localStorage.getItem(GRAFANA_KEY) || "";
  });
  $("settings-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const url = $("grafana").value.trim();
    if (url && !/^https?:\/\//.test(url)) {
      banner("The Grafana base URL must be an absolute http(s) address");
      return;
    }
    if (url) localStorage.setItem(GRAFANA_KEY, url);
    else localStorage.removeItem(GRAFANA_KEY);
    $("settings").hidden = true;
    if (token()) start();
  });
  window.addEventListener("hashchange", () => {
    if (token()) start();
  });
  if (token()) start();
  else askToken("");
});
