// Live charts, redrawn after every /metrics poll (1 s): messages/s through the gateway
// (received by the sessions, published by the hub, delivered to consumers), message latency
// (percentiles from the dataplane, the hub's mean hand-off time), and the control plane's
// own request rate and latency (its HTTP histogram), so a detached one still shows life.

import { LineChart } from "../chart.js";
import { fmtCount, fmtSeconds, h, replace } from "../dom.js";

export function mount(root, ctx) {
  const m = ctx.metrics;
  const why = (what) => () => {
    if (m.error) return `metrics unavailable: ${m.error.message}`;
    const e = ctx.engine;
    const engine = e && e.state !== "running" ? ` (engine ${e.state}${e.reason ? `: ${e.reason}` : ""})` : "";
    return `not reported: the runtime exports no ${what}${engine}`;
  };
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
      empty: () => (m.error ? `metrics unavailable: ${m.error.message}` : "waiting for the second poll…"),
    }),
    new LineChart({
      title: "API latency",
      series: [
        { key: "httpP50", label: "p50" },
        { key: "httpP99", label: "p99" },
      ],
      format: secondsAxis,
      empty: () => (m.error ? `metrics unavailable: ${m.error.message}` : "waiting for requests…"),
    }),
  ];
  const info = h("p", { class: "muted", id: "charts-info" });
  root.replaceChildren(
    h("h1", { class: "page-title" }, "Charts"),
    info,
    h(
      "div",
      { class: "charts" },
      charts.map((c) => h("section", { class: "card chart-card" }, c.el)),
    ),
  );

  const draw = () => {
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
  const onResize = () => draw();
  window.addEventListener("resize", onResize);
  draw();
  return () => {
    m.removeEventListener("tick", draw);
    window.removeEventListener("resize", onResize);
  };
}
