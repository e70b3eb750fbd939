// Small DOM helpers and formatters. Every text from the API goes through textContent
// (never innerHTML), so nothing the API or an exchange sends can inject markup.

/**
 * Build an element: h("td", {class: "num", dataset: {label: "RTT"}}, "12 ms").
 * Attributes starting with "on" are event listeners; null/false attributes are skipped.
 * Children may be strings, numbers, nodes, arrays of them, or null (skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const svg = tag.startsWith("svg:");
  const el = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") el.setAttribute("class", value);
    else if (!svg && key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** The marker for a figure the server does not report (yet): never invent a value. */
export function notReported(title = "the server does not report this figure yet") {
  return h("span", { class: "not-reported", title }, "not reported");
}

/** A rate whose counter is reported but needs a second poll to be measured. */
export function measuring() {
  return h("span", { class: "not-reported", title: "a rate needs two polls of its counter" }, "measuring…");
}

/** A rate: the value, "measuring…" when its counter is there but not yet twice, or
 * "not reported" when the server does not export the counter. */
export function rateOrNR(value, counterReported, format, title) {
  if (value === null || value === undefined || Number.isNaN(value)) {
    return counterReported ? measuring() : notReported(title);
  }
  return format(value);
}

/** A value, or "not reported" when it is null/undefined/NaN. */
export function orNR(value, format = String, title) {
  if (value === null || value === undefined || Number.isNaN(value)) return notReported(title);
  return format(value);
}

const NF = new Intl.NumberFormat("en", { maximumFractionDigits: 1 });
const NF0 = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });

export function fmtNum(n) {
  return Math.abs(n) >= 100 ? NF0.format(n) : NF.format(n);
}

/** A count that can get large: 1234567 -> "1.23M". */
export function fmtCount(n) {
  const abs = Math.abs(n);
  if (abs >= 1e9) return `${(n / 1e9).toFixed(2)}G`;
  if (abs >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (abs >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return abs < 10 ? NF.format(n) : NF0.format(n); // 0.5/s stays 0.5, not 1
}

export function fmtRate(n) {
  return `${fmtCount(n)}/s`;
}

/** Seconds -> a latency with 2-3 significant digits: 0.2 -> "200 ms", 0.0123 -> "12.3 ms". */
export function fmtSeconds(s) {
  if (s < 1e-3) return `${(s * 1e6).toFixed(s < 1e-5 ? 1 : 0)} µs`;
  if (s < 1) return `${(s * 1e3).toFixed(s < 1e-2 ? 2 : s < 1e-1 ? 1 : 0)} ms`;
  return `${s.toFixed(2)} s`;
}

export function fmtPercent(ratio) {
  return `${(ratio * 100).toFixed(ratio < 0.1 ? 1 : 0)} %`;
}

export function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

/** An ISO time -> "14:03:07" today, else "2024-05-01 14:03". */
export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const today = new Date().toDateString() === d.toDateString();
  return today
    ? d.toLocaleTimeString("en-GB", { hour12: false })
    : `${d.toISOString().slice(0, 10)} ${d.toLocaleTimeString("en-GB", { hour12: false }).slice(0, 5)}`;
}

/** "3 s ago", "5 min ago"... for an ISO time. */
export function fmtAgo(iso) {
  if (!iso) return "—";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** CPU lists like the kernel's: [0,1,2,5] -> "0-2,5". */
export function fmtCpuList(cpus) {
  if (!cpus || cpus.length === 0) return "none";
  const sorted = [...cpus].sort((a, b) => a - b);
  const parts = [];
  let start = sorted[0];
  let prev = start;
  for (const c of sorted.slice(1).concat([null])) {
    if (c !== null && c === prev + 1) {
      prev = c;
      continue;
    }
    parts.push(start === prev ? `${start}` : `${start}-${prev}`);
    start = prev = c;
  }
  return parts.join(",");
}

/** A coloured badge for a state word; the class picks the colour (see app.css). */
export function stateBadge(state) {
  const tone =
    {
      running: "ok",
      ready: "ok",
      connected: "ok",
      up: "ok",
      ok: "ok",
      open: "ok",
      active: "ok",
      starting: "warn",
      connecting: "warn",
      reconnecting: "warn",
      stopping: "warn",
      configured: "idle",
      detached: "idle",
      stopped: "idle",
      closed: "idle",
      down: "bad",
      failed: "bad",
      not_ready: "bad",
      unreachable: "bad",
      revoked: "bad",
    }[state] || "idle";
  return h("span", { class: `badge badge-${tone}`, dataset: { state } }, state);
}

/** A panel with a heading: the building block of every page. */
export function card(title, ...body) {
  return h("section", { class: "card" }, h("h2", {}, title), ...body);
}

/** A key/value list. rows: [[label, value], ...]; values may be nodes. */
export function kv(rows) {
  return h(
    "dl",
    { class: "kv" },
    rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

/**
 * Keep a table body in step with a list without rebuilding unchanged rows, so focus,
 * hover and text selection survive the periodic refreshes. `build(item)` returns a <tr>;
 * `sig(item)` is a string that changes whenever the row's content would.
 */
export function syncRows(tbody, items, key, build, sig) {
  const old = new Map([...tbody.children].map((tr) => [tr.dataset.key, tr]));
  const rows = items.map((item) => {
    const k = String(key(item));
    const s = sig(item);
    const existing = old.get(k);
    if (existing && existing.dataset.sig === s) return existing;
    const tr = build(item);
    tr.dataset.key = k;
    tr.dataset.sig = s;
    return tr;
  });
  // replaceChildren keeps the nodes that are reused (moved, not recreated).
  tbody.replaceChildren(...rows);
}

/** A table whose rows become labelled cards on narrow screens (see .table-cards). */
export function table(columns, extraClass = "") {
  const tbody = h("tbody");
  const el = h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: `table-cards ${extraClass}` },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          columns.map((c) => h("th", { scope: "col" }, c)),
        ),
      ),
      tbody,
    ),
  );
  return { el, tbody };
}

/** A <td> with the column's label, shown before the value on narrow screens. */
export function td(label, content, cls) {
  // One wrapper, so the narrow-screen grid (label | value) has exactly two items.
  return h("td", { class: cls, dataset: { label } }, h("div", { class: "cell" }, content));
}

/**
 * A button that asks for a second click within 5 s before a destructive action, instead
 * of a blocking confirm() dialog.
 */
export function confirmButton(label, onConfirm, attrs = {}) {
  let armed = null;
  const button = h("button", { type: "button", ...attrs }, label);
  button.addEventListener("click", () => {
    if (!armed) {
      button.textContent = `Confirm ${label.toLowerCase()}`;
      button.dataset.armed = "1";
      armed = setTimeout(() => {
        armed = null;
        button.textContent = label;
        delete button.dataset.armed;
      }, 5000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    delete button.dataset.armed;
    button.textContent = label;
    onConfirm(button);
  });
  return button;
}
