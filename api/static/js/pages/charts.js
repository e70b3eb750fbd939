// Live charts, redrawn after every /metrics poll (1 s): messages/s through the gateway
// (received by the sessions, published by the hub, delivered to consumers), message latency
// (percentiles from the dataplane, the hub's mean hand-off time), and the control plane's
// own request rate and latency (its HTTP histogram), so a detached one still shows life.
// Beyond the live 2 minutes: the gateway's history (GET /v1/history, admin), redrawn every
// 5 s: from Prometheus when the gateway names one (api.prometheus_url: any range, such as
// the last 7 days or a custom from/to), else from its memory (a point every 5 s for the last
// hour; api/history.py). The info line says which source answered, and why the memory did
// when a Prometheus is configured but did not answer.

import { api, auth } from "../api.js";
import { LineChart } from "../chart.js";
import { fmtCount, fmtSeconds, h, replace } from "../dom.js";

const LIVE_S = 120;
const RANGES = [
  [LIVE_S, "2 min (live)"],
  [900, "15 min"],
  [3600, "1 h"],
  [6 * 3600, "6 h"],
  [86400, "24 h"],
  [7 * 86400, "7 d"],
];
const HISTORY_POLL_MS = 5000;

export function mount(root, ctx) {
  const m = ctx.metrics;
  // Why a chart is empty: the metrics could not be read, else what `otherwise` says.
  const unless = (otherwise) => () => (m.error ? `metrics unavailable: ${m.error.message}` : otherwise());
  const why = (what) => unless(() => {
    const e = ctx.engine;
    const engine = e && e.state !== "running" ? ` (engine ${e.state}${e.reason ? `: ${e.reason}` : ""})` : "";
    return `not reported: the runtime exports no ${what}${engine}`;
  });
  const secondsAxis = (v) => (v === 0 ? "0" : fmtSeconds(v));
  const charts = [
    new LineChart({
      title: "Messages/s",
      series: [
        { key: "msgRate", label: "received (sessions)" },
        { key: "hubRate", label: "published (hub)" },
        { key: "deliveredRate", label: "delivered (consumers)" },
      ],
      format: fmtCount,
      empty: why("session_messages, and no hub reports wsgw_hub_published"),
    }),
    new LineChart({
      title: "Message latency",
      series: [
        { key: "lat50", label: "p50" },
        { key: "lat90", label: "p90" },
        { key: "lat99", label: "p99" },
        { key: "hubPublishMean", label: "hub hand-off (mean/batch)" },
      ],
      format: secondsAxis,
      empty: why("message_latency_seconds"),
    }),
    new LineChart({
      title: "API requests/s",
      series: [{ key: "httpRate", label: "requests" }],
      format: fmtCount,
      empty: unless(() => "waiting for the second poll…"),
    }),
    new LineChart({
      title: "API latency",
      series: [
        { key: "httpP50", label: "p50" },
        { key: "httpP99", label: "p99" },
      ],
      format: secondsAxis,
      empty: unless(() => "waiting for requests…"),
    }),
  ];
  const info = h("p", { class: "muted", id: "charts-info" });
  let range = LIVE_S;
  let until = null; // null: the range ends now; else its end (ms), a custom range
  let history = null; // the last /v1/history answer, or an ApiError
  let historyTimer = null;
  const canHistory = auth.has("admin");
  const buttons = RANGES.map(([seconds, label]) =>
    h(
      "button",
      {
        type: "button",
        class: "btn btn-small btn-quiet",
        dataset: { range: String(seconds) },
        disabled: seconds !== LIVE_S && !canHistory,
        title: seconds !== LIVE_S && !canHistory ? "the gateway's history needs the 'admin' scope" : null,
        "aria-pressed": String(seconds === LIVE_S),
        onclick: () => choose(seconds),
      },
      label,
    ),
  );
  const fromInput = h("input", { type: "datetime-local", id: "range-from", "aria-label": "From", disabled: !canHistory });
  const toInput = h("input", { type: "datetime-local", id: "range-to", "aria-label": "To", disabled: !canHistory });
  const custom = h(
    "form",
    { class: "ranges range-custom", id: "chart-custom-range", onsubmit: (e) => (e.preventDefault(), chooseCustom()) },
    h("label", { for: "range-from" }, "From"),
    fromInput,
    h("label", { for: "range-to" }, "to"),
    toInput,
    h("button", { type: "submit", class: "btn btn-small btn-quiet", disabled: !canHistory, dataset: { range: "custom" } }, "Show"),
  );
  const ranges = h("div", { class: "ranges", role: "group", "aria-label": "Time range", id: "chart-ranges" }, buttons);
  root.replaceChildren(
    h("h1", { class: "page-title" }, "Charts"),
    ranges,
    custom,
    info,
    h(
      "div",
      { class: "charts" },
      charts.map((c) => h("section", { class: "card chart-card" }, c.el)),
    ),
  );

  const loadHistory = async () => {
    clearTimeout(historyTimer);
    if (range === LIVE_S) return;
    const end = (until ?? Date.now()) / 1000;
    const since = end - range;
    try {
      history = await api(`/v1/history?since=${since.toFixed(0)}&until=${end.toFixed(0)}`);
    } catch (err) {
      history = err;
    }
    drawHistory();
    if (until === null) historyTimer = setTimeout(loadHistory, HISTORY_POLL_MS); // a past range stays
  };

  const drawHistory = () => {
    for (const c of charts) c.windowS = range;
    if (!history || history instanceof Error) {
      for (const c of charts) c.update([]);
      replace(
        info,
        history
          ? h("span", { class: "error-text" }, `/v1/history: ${history.message}`)
          : "Loading the gateway's history…",
      );
      return;
    }
    for (const c of charts) c.update(history.points, until ?? Date.now());
    const span = until === null ? `in the last ${fmtSpan(range)}` : `from ${fmtWhen(until - range * 1000)} to ${fmtWhen(until)}`;
    if (history.source === "prometheus") {
      replace(info, `The gateway's history from Prometheus: a point every ${fmtSpan(history.interval_s)} · ${history.points.length} points ${span}.`);
      return;
    }
    const memory =
      `The gateway's history (its memory, from its start): a point every ${history.interval_s} s, ` +
      `kept ${Math.round(history.retention_s / 60)} min · ${history.points.length} points ${span}.`;
    const beyond = range > history.retention_s ? " Older points need a Prometheus (api.prometheus_url)." : "";
    replace(
      info,
      history.fallback
        ? h("span", { class: "error-text" }, `${history.fallback}; `)
        : "",
      memory + beyond,
    );
  };

  const fmtSpan = (s) => (s >= 86400 ? `${Number((s / 86400).toFixed(1))} d` : s >= 3600 ? `${Number((s / 3600).toFixed(1))} h` : s >= 60 ? `${Number((s / 60).toFixed(1))} min` : `${s} s`);
  const fmtWhen = (ms) => new Date(ms).toLocaleString("en-GB", { hour12: false });

  const chooseCustom = () => {
    const from = Date.parse(fromInput.value);
    const to = toInput.value ? Date.parse(toInput.value) : Date.now();
    if (!Number.isFinite(from) || !(to > from)) {
      replace(info, h("span", { class: "error-text" }, "Pick a start before the end (the end may stay empty: now)."));
      return;
    }
    choose(Math.round((to - from) / 1000), to);
  };

  const choose = (seconds, end = null) => {
    range = seconds;
    until = end;
    for (const b of buttons) b.setAttribute("aria-pressed", String(end === null && Number(b.dataset.range) === seconds));
    for (const c of charts) c.fixedEnd = end !== null;
    history = null;
    if (seconds === LIVE_S) {
      clearTimeout(historyTimer);
      for (const c of charts) c.windowS = LIVE_S;
      draw();
    } else {
      drawHistory();
      loadHistory();
    }
  };

  const draw = () => {
    if (range !== LIVE_S) return; // the history has its own cadence
    // Flatten the nested latency object for the chart's series keys.
    const points = m.points.map((p) => ({
      ...p,
      lat50: p.latency?.p50,
      lat90: p.latency?.p90,
      lat99: p.latency?.p99,
    }));
    for (const c of charts) c.update(points);
    replace(
      info,
      m.error
        ? h("span", { class: "error-text" }, `/metrics: ${m.error.message}`)
        : `Polling /metrics every ${m.interval / 1000} s · ${m.ticks} polls · the last ${charts[0].windowS} s shown.`,
    );
  };
  m.addEventListener("tick", draw);
  // The width follows the window; redraw when it changes.
  const onResize = () => (range === LIVE_S ? draw() : drawHistory());
  window.addEventListener("resize", onResize);
  draw();
  return () => {
    clearTimeout(historyTimer);
    m.removeEventListener("tick", draw);
    window.removeEventListener("resize", onResize);
  };
}
