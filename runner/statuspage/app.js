// The runner's status page: polls /status and /status/history every 2 s
// and fills the page. No libraries, no external requests.
"use strict";

const POLL_MS = 2000;
let timer = null;
let paused = false;

const $ = (sel) => document.querySelector(sel);

function fmtInt(n) {
  return typeof n === "number" ? Math.round(n).toLocaleString("en-US") : "–";
}

// Unknown values are -1 in /status: shown as "unknown", never as a number.
function fmtMaybe(n, digits) {
  if (typeof n !== "number" || n < 0) return "unknown";
  return digits ? n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }) : fmtInt(n);
}

function fmtMicros(us) {
  if (typeof us !== "number" || us < 0) return "–";
  if (us < 1000) return us.toFixed(0) + " µs";
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : 1) + " ms";
  return (us / 1e6).toFixed(2) + " s";
}

function fmtDuration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
}

function fmtTime(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toLocaleTimeString("en-GB", { hour12: false });
}

function setField(name, text) {
  document.querySelectorAll('[data-field="' + name + '"]').forEach((el) => { el.textContent = text; });
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fill(list, items, empty) {
  list.replaceChildren(...(items.length ? items : [empty]));
}

// fillFrom rebuilds a list only when its data changed, so an opened
// <details> or the keyboard focus inside it survives the 2 s refresh.
const shown = new WeakMap();
function fillFrom(list, data, build, empty) {
  const key = JSON.stringify(data);
  if (shown.get(list) === key) return;
  shown.set(list, key);
  fill(list, data.map(build), empty);
}

// niceCeil rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function containerErrors(st) {
  return (st.errors || []).flatMap((r) => r.containerErrors || []);
}

function render(st) {
  setField("name", st.name);
  setField("replica", String(st.replica));
  setField("state", st.state);
  $("#state").className = "badge " + st.state;
  setField("mode", st.mode);
  setField("uptime", fmtDuration(new Date(st.time) - new Date(st.started)));
  setField("build.version", st.build.version);
  setField("build.commit", st.build.commit);
  setField("build.go_version", st.build.go_version);
  fillFrom($("#chain"), st.chain || [], (c) => el("li", {}, c), el("li", {}, "–"));

  setField("processing_rate.1m", fmtMaybe(st.processing_rate["1m"], 1));
  setField("pending", fmtMaybe(st.pending));
  setField("scaling.backlog_seconds", fmtMaybe(st.scaling.backlog_seconds, 1));
  setField("scaling.desired_replicas", fmtMaybe(st.scaling.desired_replicas));
  const cerrs = containerErrors(st);
  setField("errors.count", fmtInt(cerrs.reduce((n, e) => n + e.count, 0)));

  for (const [k, v] of Object.entries(st.totals)) setField("totals." + k, fmtInt(v));

  fill($("#latency"), (st.latency || []).filter((l) => l.count > 0).map((l) =>
    el("tr", {}, el("th", { scope: "row" }, l.stage), el("td", { class: "num" }, fmtInt(l.count)),
      el("td", { class: "num" }, fmtMicros(l.p50_us)), el("td", { class: "num" }, fmtMicros(l.p99_us)))),
    el("tr", {}, el("td", { colspan: "4", class: "empty" }, "no timings yet")));

  fillFrom($("#adapters"), st.adapters || [], (a) => {
    const cls = !a.checked ? "unknown" : a.ready ? "ok" : "bad";
    const word = !a.checked ? "no check" : a.connection === "connecting" ? "connecting" : a.ready ? "ready" : "not ready";
    const li = el("li", {}, el("span", { class: "dot " + cls, "aria-hidden": "true" }, a.ready ? "● " : "✕ "),
      a.name + " — ", el("strong", {}, word));
    if (a.error) li.append(el("div", { class: "small error-text" }, a.error));
    return li;
  }, el("li", { class: "empty" }, "no adapters"));

  const crit = Object.entries(st.critical_errors || {}).sort();
  fillFrom($("#critical"), crit, ([reason, n]) => el("li", {}, el("code", {}, reason), " ", el("strong", { "data-reason": reason }, fmtInt(n))),
    el("li", { class: "empty" }, "none"));

  fillFrom($("#errors"), cerrs, (e) => {
    const msg = el("td", {}, e.message);
    if (e.details) {
      const d = el("details", {}, el("summary", {}, "details"), el("pre", {}, e.details));
      msg.append(d);
    }
    return el("tr", { class: "container-error" },
      el("td", {}, el("time", { datetime: e.timestamp }, fmtTime(e.timestamp))),
      el("td", { class: "mono" }, e.container), el("td", {}, e.stage || ""), el("td", {}, e.code),
      el("td", { class: "num" }, fmtInt(e.count)), msg);
  }, el("tr", {}, el("td", { colspan: "6", class: "empty" }, "no container errors")));

  fillFrom($("#recent"), (st.recent_errors || []).slice(0, 10), (e) =>
    el("li", {}, el("time", { datetime: e.timestamp }, fmtTime(e.timestamp)), " ×" + e.count + " " + e.message),
    el("li", { class: "empty" }, "none"));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function renderChart(h) {
  const W = 900, H = 190, L = 48, R = 8, T = 8, B = 22;
  const box = $("#chart");
  const samples = (h.samples || []).slice(1); // the first has no rate
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" });
  const now = samples.length ? samples[samples.length - 1].t : Date.now();
  // The last 15 minutes, or less while the runner is younger (at least 1m).
  const span = Math.min(15 * 60000, Math.max(60000, samples.length ? now - samples[0].t : 0));
  const t0 = now - span;
  const peak = Math.max(0, ...samples.map((s) => Math.max(s.ack_rate, s.read_rate)));
  const maxY = niceCeil(Math.max(1, peak));
  const x = (t) => L + ((t - t0) / (now - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / maxY) * (H - T - B);
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of [0, maxY / 2, maxY]) {
    const t = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" });
    t.textContent = v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(1);
    root.append(t);
  }
  for (const f of [1, 0.75, 0.5, 0.25, 0]) {
    const ago = Math.round((span * f) / 1000);
    const t = svg("text", { x: x(now - span * f), y: H - 6, "text-anchor": f === 1 ? "start" : f === 0 ? "end" : "middle" });
    t.textContent = ago === 0 ? "now" : ago % 60 === 0 ? "-" + ago / 60 + "m" : ago > 90 ? "-" + (ago / 60).toFixed(1) + "m" : "-" + ago + "s";
    root.append(t);
  }
  const path = (key) => samples.map((s, i) => (i ? "L" : "M") + x(s.t).toFixed(1) + " " + y(s[key]).toFixed(1)).join(" ");
  if (samples.length > 1) {
    root.append(svg("path", { class: "read", d: path("read_rate") }));
    root.append(svg("path", { class: "ack", d: path("ack_rate") }));
  }
  box.replaceChildren(root);
  const last = samples[samples.length - 1];
  const summary = last ? `now ${last.ack_rate.toFixed(1)} acked/s, peak ${peak.toFixed(1)}/s over ${samples.length} samples`
    : "collecting samples";
  $("#chart-summary").textContent = summary;
  box.setAttribute("aria-label", "Processing rate over the last 15 minutes: " + summary);
}

async function poll() {
  try {
    const [st, h] = await Promise.all([
      fetch("status", { cache: "no-store" }).then((r) => { if (!r.ok) throw new Error("/status answered " + r.status); return r.json(); }),
      fetch("status/history", { cache: "no-store" }).then((r) => { if (!r.ok) throw new Error("/status/history answered " + r.status); return r.json(); }),
    ]);
    render(st);
    renderChart(h);
    $("#updated").textContent = fmtTime(st.time);
    $("#updated").setAttribute("datetime", st.time);
    $("#conn").hidden = true;
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (err) {
    // The runner went away (restarting, port-forward dropped): say so and
    // keep trying, without logging to the console every 2 s.
    $("#conn").textContent = "Cannot reach the runner: " + err.message;
    $("#conn").hidden = false;
  }
  schedule();
}

function schedule() {
  clearTimeout(timer);
  if (!paused) timer = setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  $("#refresh").addEventListener("click", () => {
    paused = !paused;
    $("#refresh").setAttribute("aria-pressed", String(paused));
    $("#refresh").textContent = paused ? "Resume refresh" : "Pause refresh";
    if (paused) clearTimeout(timer); else poll();
  });
  poll();
});
