// proctor view: renders each page from the JSON at the page's path + ".json".
// Every text from the log goes through textContent, after printable: the
// log holds what agents wrote, which is hostile input.
"use strict";

// UNSAFE matches what printable escapes.
const UNSAFE = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u206f\u{e0000}-\u{e007f}]|\p{Cs}/u;
const hex = (c, n) => c.toString(16).padStart(n, "0");

// printable is pkg/textsafe's Text, the rule of every human-readable output
// of proctor: newline and tab are kept; \r\n becomes \n; a C0 control, CR
// and DEL are shown as \r or \xNN; a C1 control, a line or paragraph
// separator, a bidirectional control (U+061C, U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069), U+206A–U+206F and a tag character as \uNNNN or
// \UNNNNNNNN (a lone surrogate, which valid UTF-8 cannot hold, as \uNNNN).
function printable(v) {
  const s = String(v);
  if (!UNSAFE.test(s)) return s;
  let out = "";
  for (const ch of s.replace(/\r\n/g, "\n")) {
    const c = ch.codePointAt(0);
    if (c === 0x0d) out += "\\r";
    else if ((c < 0x20 && c !== 0x0a && c !== 0x09) || c === 0x7f) out += "\\x" + hex(c, 2);
    else if (UNSAFE.test(ch)) out += c > 0xffff ? "\\U" + hex(c, 8) : "\\u" + hex(c, 4);
    else out += ch;
  }
  return out;
}

// SHOWN are the attributes a person reads; the others (href, value, …)
// keep their exact text.
const SHOWN = new Set(["title", "alt", "aria-label", "placeholder"]);

const OUTCOMES = ["passed", "partial", "failed", "solver_timeout", "verifier_timeout", "verifier_error", "errored", "running", "queued"];
const main = document.getElementById("main");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = printable(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, SHOWN.has(k) ? printable(v) : v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(printable(k)));
  }
  return e;
}

const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
// pp is a difference of two rates, in percentage points (never "%", which
// would read as a relative change).
const pp = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " pp");
const usd = (x) => (x === null || x === undefined ? "—" : "$" + x.toFixed(4));
const num = (x) => (x === null || x === undefined ? "—" : String(x));
// A p-value below 1e-300 is stored as that bound with an *_underflow flag.
const pValue = (p, underflow) => (p === null || p === undefined ? "—" : underflow ? "< 1e-300" : p.toPrecision(3));
const signed = (x, f) => (x === null || x === undefined ? "—" : (x > 0 ? "+" : "") + f(x));
const badge = (s) => el("span", { class: "badge st-" + (s === "failed" ? "failed-run" : s), text: s });
// pausedBadge marks a run paused and not ended ("running" beside it), as
// `proctor runs list` prints "running (paused)".
const pausedBadge = (r) => (r.control && r.control.paused && !["finished", "failed", "interrupted", "cancelled"].includes(r.status)
  ? [" ", el("span", { class: "badge st-paused", text: "paused" })] : null);
const cellBadge = (s) => el("span", { class: "badge st-" + s, text: s });
const runURL = (id) => "/runs/" + encodeURIComponent(id);
const cellURL = (run, cell) => runURL(run) + "/cells/" + cell.split("/").map(encodeURIComponent).join("/");
const shortTime = (s) => (s ? s.replace("T", " ").replace(/\.\d+Z$/, "Z") : "—");

function crumbs(...parts) {
  const c = document.getElementById("crumbs");
  c.replaceChildren(...parts.flatMap((p) => [" / ", p]));
}

// getJSON fetches a page's JSON. A 503 with "pending" (the log changing
// hands, a run still being read) throws an error marked pending, which
// fail shows as such and retries; so does a request that reached no
// answer (the viewer restarting, a connection dropped under load),
// marked unreachable.
async function getJSON(path) {
  let r;
  try {
    r = await fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  } catch (err) {
    const e = new Error("the viewer did not answer (" + err.message + "); retrying…");
    e.unreachable = true;
    throw e;
  }
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (r.status === 503 && body.pending) {
    const e = new Error(body.pending);
    e.pending = true;
    throw e;
  }
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function jsonPath() {
  return location.pathname + ".json" + location.search;
}

function withQuery(key, value) {
  const u = new URL(location.href);
  u.searchParams.set(key, value);
  return u.pathname + u.search;
}

function pager(p, key) {
  if (!p || p.pages <= 1) return null;
  const kids = [el("span", { class: "muted", text: `page ${p.page} of ${p.pages} (${p.total})` })];
  if (p.page > 1) kids.push(el("a", { href: withQuery(key, 1), text: "« first" }), el("a", { href: withQuery(key, p.page - 1), text: "‹ previous" }));
  if (p.page < p.pages) kids.push(el("a", { href: withQuery(key, p.page + 1), text: "next ›" }), el("a", { href: withQuery(key, p.pages), text: "last »" }));
  return el("div", { class: "pager" }, kids);
}

function countsText(m) {
  if (!m) return "—";
  const parts = OUTCOMES.filter((k) => m[k] > 0).map((k) => `${m[k]} ${k}`);
  for (const k of Object.keys(m).sort()) if (!OUTCOMES.includes(k) && m[k] > 0) parts.push(`${m[k]} ${k}`);
  return parts.length ? parts.join(", ") : "—";
}

function table(head, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, head.map((h) => (h instanceof Node ? h : el("th", { text: h }))))),
    el("tbody", {}, rows));
}

function kv(pairs) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "" || v === false) continue;
    dl.append(el("dt", { text: k }), el("dd", {}, v instanceof Node ? v : String(v)));
  }
  return dl;
}

// show replaces the page's content, skipping absent parts.
function show(...parts) {
  main.replaceChildren(...parts.filter((p) => p !== null && p !== undefined && p !== false));
}

let pendingRetry = null;

function fail(err) {
  if (err.pending) {
    // Not available yet: say so and render the page again shortly.
    main.replaceChildren(el("p", { class: "muted", id: "pending", text: err.message }));
    clearTimeout(pendingRetry);
    pendingRetry = setTimeout(() => route().catch(fail), 1000);
    return;
  }
  main.replaceChildren(el("p", { class: "error", text: "error: " + err.message }));
  if (err.unreachable) {
    clearTimeout(pendingRetry);
    pendingRetry = setTimeout(() => route().catch(fail), 2000);
  }
}

// ---- runs -----------------------------------------------------------------

async function renderRuns() {
  crumbs(el("span", { text: "runs" }));
  const d = await getJSON(jsonPath());
  const q = new URLSearchParams(location.search);
  const select = (name, values) => el("select", { name, onchange: (e) => e.target.form.submit() },
    el("option", { value: "", text: "any " + name }),
    values.map((v) => el("option", { value: v, text: v, selected: q.get(name) === v ? "selected" : null })));
  const form = el("form", { class: "filters", method: "get", action: "/runs" },
    select("status", d.statuses), select("harness", d.harnesses));
  const rows = d.runs.map((r) => {
    const rates = (r.progress || []).map((h) =>
      el("div", {}, el("code", { text: h.harness }), " ", h.pass_rate === null ? "—" : `${h.passed}/${h.scored} = ${pct(h.pass_rate)}`));
    return el("tr", { "data-run": r.id },
      el("td", {}, el("a", { href: runURL(r.id), text: r.id })),
      el("td", {}, badge(r.stale ? "stale" : r.pending ? "pending" : r.status), pausedBadge(r)),
      el("td", { text: shortTime(r.started_at) }),
      el("td", {}, (r.spec.harnesses || []).map((h) => el("div", {}, el("code", { text: h })))),
      el("td", { class: "num", text: num(r.cells) }),
      el("td", { text: countsText(r.states) }),
      el("td", {}, rates));
  });
  show(el("h1", { text: "Runs" }), form,
    d.runs.length ? table(["run", "status", "started (UTC)", "harnesses", "cells", "states", "pass rate"], rows, { id: "runs" })
      : el("p", { class: "muted", text: "no runs" }),
    pager(d.paging, "page"));
}

// ---- run ------------------------------------------------------------------

function ciBar(rate, ci) {
  if (rate === null || rate === undefined || !ci) return el("span", { class: "muted", text: "—" });
  const bar = el("span", { class: "ci", title: `${pct(rate)} (95 % CI ${pct(ci[0])} – ${pct(ci[1])})` },
    el("span", { class: "band" }), el("span", { class: "mark" }));
  bar.firstChild.style.left = 100 * ci[0] + "%";
  bar.firstChild.style.width = 100 * (ci[1] - ci[0]) + "%";
  bar.lastChild.style.left = `calc(${100 * rate}% - 1px)`;
  return bar;
}

function progressRows(progress) {
  return progress.map((h) => {
    const bar = el("span", { class: "bar" }, el("span"));
    bar.firstChild.style.width = (h.cells ? (100 * h.done) / h.cells : 0) + "%";
    return el("tr", { "data-harness": h.harness },
      el("td", {}, el("code", { text: h.harness })),
      el("td", { class: "num progress-done", text: `${h.done}/${h.cells}` }), el("td", {}, bar),
      el("td", { class: "num", text: h.running }), el("td", { class: "num", text: h.queued }),
      el("td", { class: "num", text: h.errored }), el("td", { class: "num", text: h.passed }),
      el("td", { class: "num", text: h.scored }), el("td", { class: "num", text: pct(h.pass_rate) }));
  });
}

function cellTitle(c) {
  return `${c.id}: ${c.state}` + (c.reward === null || c.reward === undefined ? "" : `, reward ${c.reward}`) + (c.suspect ? ", suspect" : "") +
    (c.claimed_but_failed ? ", ⚠️ the agent claimed success" : "");
}

function cellClass(c) {
  return "cell " + c.state + (c.suspect ? " suspect" : "") + (c.claimed_but_failed ? " overclaimed" : "");
}

function cellSquare(run, c) {
  return el("a", { class: cellClass(c), href: cellURL(run, c.id), title: cellTitle(c), "data-cell": c.id, "aria-label": cellTitle(c) });
}

function summaryTable(d) {
  const rows = d.harnesses.filter((h) => d.summary[h]).map((h) => {
    const s = d.summary[h];
    return el("tr", {},
      el("td", {}, el("code", { text: h }), h === d.baseline ? el("span", { class: "muted", text: " (baseline)" }) : null),
      el("td", { class: "num", text: s.n }), el("td", { class: "num", text: s.errored }),
      el("td", { class: "num", text: s.scored }), el("td", { class: "num", text: s.passed }),
      el("td", { class: "num", text: pct(s.pass_rate) }), el("td", {}, ciBar(s.pass_rate, s.pass_rate_ci)),
      el("td", { class: "num", text: s.pass_rate_ci ? `${pct(s.pass_rate_ci[0])} – ${pct(s.pass_rate_ci[1])}` : "—" }),
      el("td", { class: "num", text: usd(s.cost.total_cost_usd) + (s.cost.source === "observed" ? " (observed)" : "") }),
      el("td", { class: "num", text: usd(s.cost.cost_per_pass_usd) }),
      el("td", { class: "num" + (s.suspect ? " suspect" : ""), text: s.suspect || 0 }),
      el("td", { class: "num" + (s.claimed_but_failed ? " overclaimed" : ""), text: s.claimed_but_failed ? "⚠️ " + s.claimed_but_failed : 0 }));
  });
  return table(["harness", "n", "errored", "scored", "passed", "pass rate", "95 % CI", "interval", "cost", "cost / pass", "suspect", "claimed, failed"], rows, { id: "summary" });
}

function comparisonTable(d) {
  const hs = Object.keys(d.comparisons || {}).sort((a, b) => d.harnesses.indexOf(a) - d.harnesses.indexOf(b));
  if (!hs.length) return null;
  const rows = hs.map((h) => {
    const c = d.comparisons[h], m = c.mcnemar;
    const ci = m.ci_lo === null || m.ci_lo === undefined ? "—" : `${signed(m.ci_lo, pp)} … ${signed(m.ci_hi, pp)}`;
    return el("tr", {},
      el("td", {}, el("code", { text: h })), el("td", {}, el("code", { text: c.baseline })),
      el("td", { class: "num", text: signed(c.pass_rate_delta, pp) }),
      el("td", { class: "num", text: signed(m.paired_pass_rate_delta, pp) }), el("td", { class: "num", text: ci }),
      el("td", { class: "num", text: m.n_units === undefined ? m.n : `${m.n} (${m.n_units})` }),
      el("td", { class: "num", text: m.n_gained }), el("td", { class: "num", text: m.n_lost }),
      el("td", { class: "num", text: m.n_both_passed }), el("td", { class: "num", text: m.n_both_failed }),
      el("td", { class: "num", text: m.n_excluded || 0 }),
      el("td", { class: "num", text: pValue(m.p_exact, m.p_exact_underflow) }),
      el("td", { class: "num", text: pValue(m.p_adjusted, m.p_adjusted_underflow) }),
      el("td", { text: m.significant === null ? "—" : m.significant ? "yes" : "no" }),
      el("td", { class: "num", text: signed(c.cost_delta_usd, (x) => "$" + x.toFixed(4)) }));
  });
  return table(["harness", "baseline", "Δ pass rate", "paired Δ", "95 % CI", "pairs (tasks)", "gained", "lost", "both passed", "both failed", "excluded", "p exact", "p adjusted", "significant", "Δ cost"], rows, { id: "comparisons" });
}

// pseudoCaveat is the report's pseudo-replication caveat: when an arm's
// pairs hold several repeats of one task, the exact p and the Newcombe
// interval overstate the evidence; the tasks count and the bootstrap over
// tasks are what to judge by. Null when no arm's pairs repeat a task.
function pseudoCaveat(d) {
  const hs = Object.keys(d.comparisons || {}).filter((h) => d.comparisons[h].mcnemar.pseudo_replicated)
    .sort((a, b) => d.harnesses.indexOf(a) - d.harnesses.indexOf(b));
  if (!hs.length) return null;
  const boots = hs.map((h) => d.comparisons[h].mcnemar).map((m, i) =>
    m.bootstrap_ci_lo === null || m.bootstrap_ci_lo === undefined ? null : `"${hs[i]}" ${signed(m.bootstrap_ci_lo, pp)} to ${signed(m.bootstrap_ci_hi, pp)}`).filter(Boolean);
  return el("p", { id: "comparisons-caveat", class: "caveat", text:
    `Caveat (pseudo-replication): the pairs of ${hs.map((h) => `"${h}"`).join(", ")} include several repeats of the same task, ` +
    "which are not independent; the exact p-values and the Newcombe interval treat every pair as independent and overstate the evidence. " +
    "Judge by the tasks count beside the pairs" +
    (boots.length ? `, and by the seeded bootstrap over tasks, which keeps a task's repeats together (95 %: ${boots.join("; ")})` : "") + "." });
}

function gridTable(d) {
  const run = d.record.id;
  const rows = d.grid.map((g) => el("tr", {},
    el("td", { class: "task", title: g.task }, el("code", { text: g.task })),
    d.harnesses.map((h) => el("td", {}, (g.cells[h] || []).map((c) => cellSquare(run, c))))));
  return table([el("th", { text: "task" }), ...d.harnesses.map((h) => el("th", {}, el("code", { text: h })))], rows, { class: "grid", id: "grid" });
}

// legend names every state a grid square can show; outcomes drawn alike
// (style.css) share a swatch.
function legend() {
  return el("div", { class: "legend muted", id: "legend" }, "outcome:",
    [["passed"], ["partial"], ["failed"], ["solver_timeout", "solver_timeout, verifier_timeout"],
      ["errored", "errored, verifier_error (no verdict)"], ["running"], ["queued"]]
      .map(([s, label]) => [el("span", { class: "cell " + s }), " " + (label || s)]));
}

function runHeader(d) {
  const r = d.record, spec = r.spec || {};
  return kv([
    ["status", el("span", { id: "run-status" }, badge(d.stale ? "stale" : r.status))],
    ["started", shortTime(r.started_at)], ["finished", shortTime(r.finished_at)],
    ["tasks", (spec.tasks_root || "") + (spec.all ? " (all)" : spec.tasks ? " (" + spec.tasks.join(", ") + ")" : "")],
    ["harnesses", (spec.harnesses || []).join(", ")], ["models", (spec.models || []).join(", ")],
    ["baseline", spec.baseline_harness], ["cells", el("span", { id: "run-cells", text: `${r.cells || 0}: ${countsText(d.states)}` })],
    ["events", el("span", { id: "run-events", text: d.events })],
    ["artifact", r.artifact], ["report", r.report], ["error", r.error],
    d.stale ? ["note", "no proctor process serves this store: the run's process died; `proctor replay " + r.id + "` projects what finished"] : [],
  ]);
}

// controlPart is the run's control: why it is paused, its control
// actions, and, when this viewer takes them and the run is live, buttons
// that pause, continue or cancel it (POST /runs/RUN/control).
function controlPart(id, d) {
  const c = d.control || {}, st = c.state || {};
  const parts = [];
  if (st.paused) {
    parts.push(el("p", { class: "paused", id: "run-paused" }, el("strong", { text: "paused" }),
      " by " + st.paused_by + (st.paused_cap ? " (cap " + st.paused_cap + ")" : "") + (st.paused_why ? ": " + st.paused_why : "")));
  }
  if (c.actions && c.actions.length) parts.push(el("ul", { class: "muted", id: "run-controls" }, c.actions.map((a) => el("li", { text: a }))));
  if (c.allowed && !d.finished && !d.stale) {
    const act = (action) => async () => {
      const why = window.prompt(action + " run " + id + ": why? (recorded in the run's log)", "");
      if (why === null) return;
      const r = await fetch(runURL(id) + "/control", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Proctor-Control": "1", Accept: "application/json" },
        body: JSON.stringify({ action, why }),
      });
      const body = await r.json().catch(() => ({ error: r.statusText }));
      if (!r.ok) { window.alert(body.error || r.statusText); return; }
      route();
    };
    parts.push(el("p", { class: "control-buttons" },
      st.paused ? el("button", { id: "btn-continue", onclick: act("continue"), text: "Continue" })
        : el("button", { id: "btn-pause", onclick: act("pause"), text: "Pause" }),
      " ", el("button", { id: "btn-cancel", class: "danger", onclick: act("cancel"), text: "Cancel run" })));
  }
  return parts.length ? el("div", { id: "control-section" }, parts) : null;
}

let liveSource = null;

async function renderRun(id) {
  clearTimeout(runRetry);
  crumbs(el("a", { href: "/runs", text: "runs" }), el("span", { text: id }));
  const d = await getJSON(jsonPath());
  document.title = "proctor view · " + printable(id);
  show(
    el("h1", { text: "Run " + id }), runHeader(d), controlPart(id, d),
    el("h2", { text: "Progress" }),
    table(["harness", "done", "", "running", "queued", "errored", "passed", "scored", "pass rate"], progressRows(d.progress), { id: "progress" }),
    el("h2", { text: "Pass rate per harness" }), el("div", { id: "summary-section" }, summaryTable(d)),
    d.baseline ? el("h2", { text: "Against the baseline (paired, McNemar)" }) : null,
    el("div", { id: "comparisons-section" }, comparisonsPart(d)),
    el("h2", { text: "Tasks × harnesses" }), legend(), pager(d.paging, "page"), gridTable(d), pager(d.paging, "page"),
    el("h2", { text: "Figures" }), el("div", { id: "figures-section" }, figuresPart(d)));
  if (!d.finished && !d.stale) {
    follow(id);
    runRetry = setTimeout(() => refreshSummary(id).catch(fail), 3000);
  } else if (d.summary_pending) runRetry = setTimeout(() => refreshSummary(id).catch(fail), 1000);
}

function comparisonsPart(d) {
  if (!d.baseline) return null;
  if (d.summary_pending && !d.comparisons) return el("p", { class: "muted", id: "comparisons-pending", text: "computing the comparisons…" });
  const t = comparisonTable(d);
  if (!t) return null;
  // What each comparison means, in one plain sentence, before the terms.
  const plain = d.comparisons_plain || {};
  const hs = Object.keys(plain).sort((a, b) => d.harnesses.indexOf(a) - d.harnesses.indexOf(b));
  return el("div", { id: "comparisons-body" }, t, el("div", { id: "comparisons-plain" }, hs.map((h) => el("p", { text: plain[h] }))), pseudoCaveat(d));
}

function figuresPart(d) {
  if (!d.figures.length) return el("p", { class: "muted", text: d.summary_pending ? "drawing the figures…" : "no figures yet (nothing scored)" });
  // The query string changes with each build, so a redrawn figure is fetched again.
  return el("div", { class: "figures", id: "figures" }, d.figures.map((f) =>
    el("figure", {}, el("a", { href: f.url }, el("img", { src: f.url + "?v=" + d.events, alt: f.title })), el("figcaption", { text: f.title }))));
}

// refreshSummary fetches the run's JSON again and replaces the summary,
// the comparisons and the figures in place (the grid and progress follow
// the live stream).
async function refreshSummary(id) {
  clearTimeout(runRetry);
  const d = await getJSON(runURL(id) + ".json" + location.search);
  const swap = (sel, node) => { const e = document.getElementById(sel); if (e) e.replaceChildren(...[node].filter(Boolean)); };
  swap("summary-section", summaryTable(d));
  swap("comparisons-section", comparisonsPart(d));
  swap("figures-section", figuresPart(d));
  if (d.summary_pending || !d.finished) runRetry = setTimeout(() => refreshSummary(id).catch(fail), d.finished ? 1000 : 3000);
}

let runRetry = null;

// follow applies the run's Server-Sent Events to the page in place.
function follow(id) {
  if (liveSource) liveSource.close();
  const ind = document.getElementById("live");
  const src = new EventSource(runURL(id) + "/live");
  liveSource = src;
  src.addEventListener("open", () => { ind.textContent = "live"; ind.classList.add("on"); });
  src.addEventListener("progress", (ev) => {
    const u = JSON.parse(ev.data);
    const tbody = document.querySelector("#progress tbody");
    if (tbody) tbody.replaceChildren(...progressRows(u.progress));
    const status = document.getElementById("run-status");
    if (status) status.replaceChildren(badge(u.status));
    const cells = document.getElementById("run-cells");
    const total = u.progress.reduce((n, h) => n + h.cells, 0);
    if (cells) cells.textContent = `${total}: ${countsText(u.states)}`;
    const evs = document.getElementById("run-events");
    if (evs) evs.textContent = u.events;
    for (const c of u.cells) {
      const sq = document.querySelector(`a.cell[data-cell="${CSS.escape(c.id)}"]`);
      if (sq) {
        sq.className = cellClass(c);
        sq.title = cellTitle(c);
        sq.setAttribute("aria-label", cellTitle(c));
      }
    }
    if (u.finished) {
      src.close();
      ind.textContent = "finished";
      ind.classList.remove("on");
      renderRun(id).catch(fail); // the final record, summary, comparisons and figures, in place
    }
  });
  src.addEventListener("error", () => {
    ind.textContent = "reconnecting…";
    ind.classList.remove("on");
    // A stream refused while the log changes hands is not retried by the
    // browser: open it again.
    if (src.readyState === EventSource.CLOSED && liveSource === src) setTimeout(() => { if (liveSource === src) follow(id); }, 2000);
  });
}

// ---- cell -----------------------------------------------------------------

function compact(v, n) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > n ? s.slice(0, n) + "…" : s;
}

function transcriptEntry(e) {
  const d = e.data || {};
  let head, body;
  switch (e.type) {
    case "Message": head = `${d.role || "agent"}: ${compact(d.text || "", 120)}`; body = d.text || ""; break;
    case "ToolCall": head = `tool ${d.name}${d.error ? " (error)" : ""}`; body = JSON.stringify(d.input, null, 2); break;
    case "Command": head = `$ ${compact(d.command, 120)}` + (d.exit_code === undefined ? "" : `  → exit ${d.exit_code}`); body = (d.command || "") + "\n" + (d.output || ""); break;
    case "FileChange": head = `${d.kind || "changed"} ${d.path}`; body = ""; break;
    default: head = e.type; body = JSON.stringify(d, null, 2);
  }
  return el("details", { class: "tr-" + e.type },
    el("summary", {}, el("span", { class: "muted", text: shortTime(e.at) + "  " }), el("b", { text: e.type + " " }), head),
    body ? el("pre", { text: body }) : null);
}

function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? prefix + "." + k : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out.push([key, Array.isArray(v) ? JSON.stringify(v) : String(v)]);
  }
  return out;
}

let cellRetry = null;

async function renderCell(run, cell) {
  crumbs(el("a", { href: "/runs", text: "runs" }), el("a", { href: runURL(run), text: run }), el("span", { text: cell }));
  clearTimeout(cellRetry);
  const d = await getJSON(jsonPath());
  document.title = "proctor view · " + printable(cell);
  const row = d.row;
  const settled = ["passed", "partial", "failed", "solver_timeout", "verifier_timeout", "verifier_error", "errored"].includes(d.state);
  const parts = [el("h1", { text: "Cell " + cell }),
    kv([["run", el("a", { href: runURL(run), text: run })], ["state", el("span", { id: "cell-state" }, cellBadge(d.state))],
      ["task", d.plan && d.plan.task], ["harness", d.plan && d.plan.harness], ["model", d.plan && d.plan.model],
      ["repeat", d.plan && d.plan.repeat], ["attempt", d.plan && d.plan.attempt], ["output dir", d.plan && d.plan.output_dir],
      // A cell still going has no error yet (its row says what it would be if the run ended now).
      ["reward", row && row.reward !== null ? row.reward : null], ["error", settled && row && row.error], ["error class", settled && row && row.error_class]])];
  if (d.state === "pending") {
    parts.push(el("p", { class: "muted", id: "pending", text: "pending: this cell is not in the log yet; retrying…" }));
  }
  const tamper = (row && row.metrics && row.metrics.tamper_findings) || [];
  if (tamper.length) {
    parts.push(el("h2", { class: "suspect", text: "Suspect" }),
      el("p", { text: "The solve left files that shadow what the verifier runs; the verdict is the verifier's, counted as scored." }),
      el("ul", { id: "tamper-findings" }, tamper.map((f) => el("li", {}, el("code", { text: f.path }), el("span", { text: ` ${f.change} (${f.shadows})` })))));
  }
  // The agent's own final word beside the verifier's verdict; ⚠️ when it
  // claimed success and the verifier scored the cell below 1.
  const claim = row && row.agent_claim;
  if (claim) {
    const over = d.claimed_but_failed;
    parts.push(el("h2", { class: over ? "overclaimed" : null, text: over ? "⚠️ Agent's claim" : "Agent's claim" }),
      el("p", { id: "agent-claim-verdict", text: (claim.claimed_success ? "The agent claims success" : "The agent does not claim success") +
        `; the verifier: ${row.outcome}` + (row.reward === null || row.reward === undefined ? "" : ` (reward ${row.reward})`) + "." }),
      el("pre", { id: "agent-claim", text: claim.text }));
  }
  const vfind = (row && row.metrics && row.metrics.verifier_findings) || [];
  if (vfind.length) {
    parts.push(el("h2", { text: "Verifier findings" }),
      el("ul", { id: "verifier-findings" }, vfind.map((f) => el("li", {}, el("code", { text: f.kind }), el("span", { text: ": " + f.detail })))));
  }
  // Timeline.
  // In log order: what the launcher gathers after the solve (egress
  // decisions, model calls, operations) is logged then, with the times it
  // happened, so "at" can go back down the table.
  parts.push(el("h2", { text: "Timeline" }), pager(d.timeline_paging, "events"),
    d.timeline.length ? el("p", { class: "muted", id: "timeline-order", text: "In the order the log recorded them; \"at\" is when each happened, so what is gathered after the solve (egress decisions, model calls, operations) can show an earlier time than the rows above it." }) : null,
    d.timeline.length ? table(["at (UTC)", "attempt", "type", "source", "data"], d.timeline.map((e) => el("tr", { "data-type": e.type },
      el("td", { text: shortTime(e.at) }), el("td", { class: "num", text: e.attempt || 1 }), el("td", {}, el("b", { text: e.type })),
      el("td", { class: "muted", text: e.source }), el("td", {}, el("code", { text: compact(e.data, 240) })))), { id: "timeline" })
      : el("p", { class: "muted", text: d.state === "pending" ? "pending" : "no events" }));
  // Transcript.
  parts.push(el("h2", { text: "Transcript" }), pager(d.transcript_paging, "transcript"),
    d.transcript.length ? el("div", { id: "transcript" }, d.transcript.map(transcriptEntry))
      : el("p", { class: "muted", text: "no messages, tool calls or commands" }));
  // Files.
  parts.push(el("h2", { text: "Files" }));
  if (d.files_pending && settled) parts.push(el("p", { class: "muted", id: "files-none", text: "no files: the cell's output directory does not exist" }));
  else if (d.files_pending) parts.push(el("p", { class: "muted", id: "files-pending", text: "pending: the cell's files are not written yet; retrying…" }));
  else parts.push(el("div", { id: "files" }, d.files.map((f) => el("details", { open: /(^|\/)(solve\.log|verifier\.log|reward\.(txt|json))$/.test(f.name) ? "open" : null },
    el("summary", {}, el("code", { text: f.name }), el("span", { class: "muted", text: `  ${f.size} bytes  ` }), el("a", { href: f.url, target: "_blank", rel: "noopener", text: "whole file" })),
    f.tail ? el("pre", { text: (f.truncated ? "…\n" : "") + f.tail }) : el("p", { class: "muted", text: f.size ? "(binary)" : "(empty)" })))));
  // Egress, isolation, metrics.
  if (d.egress.length) {
    parts.push(el("h2", { text: "Egress decisions" }), table(["host", "port", "method", "decision", "reason"],
      d.egress.map((x) => el("tr", {}, el("td", { text: x.host }), el("td", { class: "num", text: x.port }), el("td", { text: x.method }),
        el("td", {}, el("span", { class: "badge st-" + (x.decision === "allowed" ? "passed" : "failed"), text: x.decision })),
        el("td", { text: x.reason || "" })))));
  }
  if (row && row.metrics.usage_observed) {
    // The agent's own figures beside what the model gateway saw.
    const m = row.metrics, u = m.usage_observed, n = (x) => (x === null || x === undefined ? "—" : String(x));
    parts.push(el("h2", { text: "Model usage" }),
      table(["", "input", "output", "cache read", "cache write", "requests", "cost"], [
        [m.prompt_tokens, m.completion_tokens, m.cache_read_tokens, m.cache_write_tokens, m.cost_usd].every((x) => x === null || x === undefined)
          ? el("tr", {}, el("td", { text: "reported by the agent" }), el("td", { colspan: "6", id: "usage-not-reported", text: "not reported by harness" }))
          : el("tr", {}, el("td", { text: "reported by the agent" }), el("td", { class: "num", text: n(m.prompt_tokens) }),
            el("td", { class: "num", text: n(m.completion_tokens) }), el("td", { class: "num", text: n(m.cache_read_tokens) }),
            el("td", { class: "num", text: n(m.cache_write_tokens) }), el("td", { class: "num", text: n(m.n_calls) }), el("td", { class: "num", text: usd(m.cost_usd) })),
        el("tr", {}, el("td", { text: "observed by the gateway" }), el("td", { class: "num", text: n(u.input_tokens) }),
          el("td", { class: "num", text: n(u.output_tokens) }), el("td", { class: "num", text: n(u.cache_read_tokens) }),
          el("td", { class: "num", text: n(u.cache_write_tokens) }), el("td", { class: "num", text: n(u.requests) }),
          el("td", { class: "num", text: usd(u.cost_usd) + (u.cost_usd === null && u.cost_null_reason ? " (" + u.cost_null_reason + ")" : "") }))], { id: "usage" }));
    if (u.reported_differs) parts.push(el("p", {}, el("span", { class: "badge st-failed", id: "usage-differs", text: "reported and observed tokens differ by more than 1 %" })));
  }
  if (d.model_calls && d.model_calls.length) {
    parts.push(el("h2", { text: "Model calls" }), table(["provider", "model", "path", "status", "input", "output", "cache read", "cache write", "first byte (s)", "duration (s)", "cost"],
      d.model_calls.map((c) => el("tr", {}, el("td", { text: c.provider }), el("td", { text: c.model || "" }), el("td", {}, el("code", { text: c.method + " " + c.path })),
        el("td", { class: "num", text: c.status }), el("td", { class: "num", text: c.input_tokens ?? "—" }), el("td", { class: "num", text: c.output_tokens ?? "—" }),
        el("td", { class: "num", text: c.cache_read_tokens ?? "—" }), el("td", { class: "num", text: c.cache_write_tokens ?? "—" }),
        el("td", { class: "num", text: c.ttfb_sec.toFixed(3) }), el("td", { class: "num", text: c.duration_sec.toFixed(3) }),
        el("td", { class: "num", text: c.cost_usd === undefined ? (c.cost_note || "—") : usd(c.cost_usd) }))), { id: "model-calls" }));
  }
  if (row && row.metrics.isolation) parts.push(el("h2", { text: "Isolation" }), kv(flatten(row.metrics.isolation, "", [])));
  if (row && row.metrics.isolation_probe) parts.push(el("h2", { text: "Isolation probe" }), kv(flatten(row.metrics.isolation_probe, "", [])));
  if (row) {
    const m = Object.assign({}, row.metrics);
    delete m.isolation; delete m.isolation_probe;
    parts.push(el("h2", { text: "Metrics" }), kv(flatten(m, "", [])));
    if (row.stdout_tail) parts.push(el("h2", { text: "Stdout tail" }), el("pre", { text: row.stdout_tail }));
  }
  show(...parts);
  if (!settled) cellRetry = setTimeout(() => renderCell(run, cell).catch(fail), 2000);
}

// ---- routing --------------------------------------------------------------

function route() {
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] !== "runs") return renderRuns();
  if (parts.length === 1) return renderRuns();
  if (parts.length === 2) return renderRun(parts[1]);
  if (parts[2] === "cells" && parts.length > 3) return renderCell(parts[1], parts.slice(3).join("/"));
  return Promise.reject(new Error("no page at " + location.pathname));
}

route().catch(fail);
