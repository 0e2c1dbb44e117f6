// The station dashboard page. Everything shown comes from boards and records, which are not
// trusted: text is only ever set with textContent / setAttribute, never parsed as HTML.
"use strict";

const tiles = new Map();           // slot -> tile data
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function renderTile(t) {
  const id = "tile-" + encodeURIComponent(t.slot);
  let box = document.getElementById(id);
  if (!box) {
    box = el("div", "tile");
    box.id = id;
    box.setAttribute("data-slot", t.slot);
    placeTile(box, t.slot);
  }
  box.setAttribute("data-phase", t.phase);
  box.setAttribute("data-serial", t.serial || "");
  box.setAttribute("data-ts", String(t.ts || 0));
  box.replaceChildren();
  box.append(el("div", "slot", t.slot), el("div", "phase", t.label));
  const who = [t.serial, t.release].filter(Boolean).join("  \u00b7  ");
  box.append(el("div", "who", who || "\u00a0"));
  if (t.phase === "flashing" || t.phase === "flashed") {
    const bar = el("div", "bar");
    const fill = el("div");
    const pct = t.phase === "flashed" ? 100 : (t.total ? Math.min(100, Math.round(100 * t.done / t.total)) : 0);
    fill.style.width = pct + "%";
    bar.append(fill);
    box.append(bar);
    const parts = [];
    if (t.total) parts.push(t.done + "/" + t.total + " partitions");
    if (t.partition && t.phase === "flashing") parts.push(t.partition);
    if (t.rate_kbs) parts.push(Math.round(t.rate_kbs) + " kB/s");
    if (t.tries > 1) parts.push("try " + t.tries);
    box.append(el("div", "part", parts.join("  \u00b7  ")));
  }
  if (t.reason) box.append(el("div", "reason", t.reason));
  if (t.in_edl && (t.phase === "passed" || t.phase === "failed" || t.phase === "interrupted")) {
    box.append(el("div", "part", "back in EDL"));
  }
}

function slotKey(s) {   // natural order: "slot 2" before "slot 10"
  return s.split(/(\d+)/).filter(Boolean).map((p) => (/^\d+$/.test(p) ? p.padStart(8, "0") : p)).join("");
}

function placeTile(box, slot) {
  const grid = $("tiles");
  const key = slotKey(slot);
  for (const other of grid.children) {
    if (slotKey(other.getAttribute("data-slot")) > key) { grid.insertBefore(box, other); return; }
  }
  grid.append(box);
}

function summarize() {
  const n = {};
  for (const t of tiles.values()) n[t.label] = (n[t.label] || 0) + 1;
  $("summary").textContent = Object.entries(n).map(([k, v]) => v + " " + k).join("  \u00b7  ");
}

function connect() {
  const src = new EventSource("/events");
  src.addEventListener("open", () => { $("link").textContent = "live"; $("link").className = "link up"; });
  src.addEventListener("error", () => { $("link").textContent = "reconnecting\u2026"; $("link").className = "link down"; });
  src.addEventListener("snapshot", (e) => {
    const data = JSON.parse(e.data);
    $("station").textContent = data.station || "";
    tiles.clear();
    $("tiles").replaceChildren();
    for (const t of data.tiles) { tiles.set(t.slot, t); renderTile(t); }
    summarize();
  });
  src.addEventListener("tile", (e) => {
    const t = JSON.parse(e.data);
    tiles.set(t.slot, t);
    renderTile(t);
    summarize();
  });
}

function fmtTime(epoch) {
  if (!epoch) return "";
  const d = new Date(epoch * 1000);
  return d.toLocaleString();
}

async function search(ev) {
  if (ev) ev.preventDefault();
  const form = new FormData($("search"));
  const q = new URLSearchParams();
  for (const [k, v] of form.entries()) if (String(v).trim()) q.set(k, String(v).trim());
  const body = $("attempts").querySelector("tbody");
  let data;
  try {
    const r = await fetch("/api/history?" + q.toString());
    data = await r.json();
    if (!r.ok) { $("history-note").textContent = data.error || ("error " + r.status); body.replaceChildren(); return; }
  } catch (e) {
    $("history-note").textContent = "the station did not answer";
    return;
  }
  $("history-note").textContent = data.attempts.length + " attempt(s)" + (data.note ? " \u2014 " + data.note : "");
  body.replaceChildren();
  for (const a of data.attempts) {
    const tr = el("tr");
    tr.setAttribute("data-attempt", String(a.id));
    const dur = a.ended && a.started ? (a.ended - a.started).toFixed(1) : "";
    tr.append(el("td", "", a.id), el("td", "", fmtTime(a.started)), el("td", "", a.station), el("td", "", a.serial),
              el("td", "", a.slot),
              el("td", "", a.release_id), el("td", a.result, a.result), el("td", "", dur),
              el("td", "reason", a.error));
    const logCell = el("td");
    if (a.log_url && /^\/log\/\d+$/.test(a.log_url)) {
      const link = el("a", "", "qdl log");
      link.href = a.log_url;
      link.target = "_blank";
      link.rel = "noopener";
      logCell.append(link);
    }
    tr.append(logCell);
    body.append(tr);
  }
}

function route() {
  const hist = location.hash === "#history";
  $("slots").hidden = hist;
  $("history").hidden = !hist;
  $("nav-slots").classList.toggle("active", !hist);
  $("nav-history").classList.toggle("active", hist);
  if (hist) search();
}

document.addEventListener("DOMContentLoaded", () => {
  $("search").addEventListener("submit", search);
  window.addEventListener("hashchange", route);
  route();
  connect();
});
