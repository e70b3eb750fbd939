// A small SVG line chart: time on x (the last `windowS` seconds), one polyline per series,
// gaps where a value is missing. Drawn from scratch on every update (a few hundred points
// at most), sized to its container's width, coloured by CSS classes (no inline style, so
// the page's CSP holds).

import { h, replace } from "./dom.js";

const HEIGHT = 180;
const PAD = { left: 58, right: 12, top: 12, bottom: 24 };

export class LineChart {
  /**
   * series: [{key, label}]; format: number -> axis/legend text;
   * empty: () => text shown when no series has a value (e.g. "not reported: ...").
   */
  constructor({ title, series, format, windowS = 120, empty }) {
    this.series = series;
    this.format = format;
    this.windowS = windowS;
    this.empty = empty;
    this.svg = h("svg:svg", {
      class: "chart-svg",
      height: HEIGHT,
      role: "img",
      "aria-label": title,
      preserveAspectRatio: "xMinYMin meet",
    });
    this.legend = h("ul", { class: "legend" });
    // Why the chart is empty, in HTML so that a long reason wraps on a phone.
    this.note = h("p", { class: "chart-empty", hidden: true });
    this.el = h(
      "figure",
      { class: "chart", dataset: { chart: title } },
      h("figcaption", {}, title),
      this.svg,
      this.note,
      this.legend,
    );
    this.draws = 0;
  }

  /** points: [{t (ms), [key]: number|null}], oldest first. */
  update(points, now = Date.now()) {
    const width = Math.max(240, Math.round(this.el.clientWidth || 600));
    const svg = this.svg;
    svg.setAttribute("viewBox", `0 0 ${width} ${HEIGHT}`);
    svg.setAttribute("width", String(width));
    const x0 = PAD.left;
    const x1 = width - PAD.right;
    const y0 = HEIGHT - PAD.bottom;
    const y1 = PAD.top;
    const tMin = now - this.windowS * 1000;
    const visible = points.filter((p) => p.t >= tMin);
    const values = [];
    for (const p of visible) {
      for (const s of this.series) {
        const v = p[s.key];
        if (Number.isFinite(v)) values.push(v);
      }
    }
    const yMax = niceMax(values.length ? Math.max(...values) : 1);
    const xOf = (t) => x0 + ((t - tMin) / (this.windowS * 1000)) * (x1 - x0);
    const yOf = (v) => y0 - (v / yMax) * (y0 - y1);

    const nodes = [];
    // Grid and y labels (0, half, max); no labels on an empty chart: its scale means nothing.
    for (const frac of [0, 0.5, 1]) {
      const y = yOf(yMax * frac);
      nodes.push(h("svg:line", { class: "gridline", x1: x0, x2: x1, y1: y, y2: y }));
      if (values.length) {
        nodes.push(
          h(
            "svg:text",
            { class: "axis", x: x0 - 6, y: y + 4, "text-anchor": "end" },
            this.format(yMax * frac),
          ),
        );
      }
    }
    // x labels: time before now, or clock times when the range ends in the past (`fixedEnd`).
    for (const ago of [this.windowS, this.windowS / 2, 0]) {
      const x = xOf(now - ago * 1000);
      const anchor = ago === 0 ? "end" : ago === this.windowS ? "start" : "middle";
      const label = this.fixedEnd ? clockLabel(now - ago * 1000, this.windowS) : agoLabel(ago);
      nodes.push(h("svg:text", { class: "axis", x, y: HEIGHT - 6, "text-anchor": anchor }, label));
    }
    // One path per series; "M" starts a new segment after a gap.
    let drawn = 0;
    this.series.forEach((s, i) => {
      let d = "";
      let pen = false;
      for (const p of visible) {
        const v = p[s.key];
        if (!Number.isFinite(v)) {
          pen = false;
          continue;
        }
        d += `${pen ? "L" : "M"}${xOf(p.t).toFixed(1)},${yOf(v).toFixed(1)}`;
        pen = true;
        drawn += 1;
      }
      if (d) nodes.push(h("svg:path", { class: `line s${i}`, d, dataset: { series: s.key } }));
    });
    const reason = drawn === 0 ? (this.empty ? this.empty() : "no data yet") : "";
    if (drawn === 0) {
      // The first words in the plot ("not reported", "waiting…"), the whole reason below it.
      const short = /^not reported/.test(reason) ? "not reported" : reason.split(":")[0];
      nodes.push(
        h(
          "svg:text",
          { class: "chart-empty-mark", x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle" },
          short,
        ),
      );
    }
    if (this.note.textContent !== reason) this.note.textContent = reason;
    this.note.hidden = drawn !== 0;
    replace(svg, ...nodes);
    this.draws += 1;
    // For tests and curious operators: how many points are drawn, and the newest values.
    svg.dataset.points = String(drawn);
    svg.dataset.draws = String(this.draws);
    const last = visible.at(-1) || {};
    replace(
      this.legend,
      this.series.map((s, i) =>
        h(
          "li",
          { class: `s${i}` },
          h("span", { class: "swatch" }),
          `${s.label} `,
          h("strong", {}, Number.isFinite(last[s.key]) ? this.format(last[s.key]) : "—"),
        ),
      ),
    );
  }
}

/** An x label: "now", "-60s", "-7.5 min". */
function agoLabel(ago) {
  if (!ago) return "now";
  if (ago >= 2 * 86400) return `-${Number((ago / 86400).toFixed(1))} d`;
  if (ago >= 2 * 3600) return `-${Number((ago / 3600).toFixed(1))} h`;
  return ago >= 300 ? `-${Number((ago / 60).toFixed(1))} min` : `-${ago}s`;
}

/** A point in time on a range that ends in the past: its clock time (and day if long). */
function clockLabel(t, windowS) {
  const d = new Date(t);
  const time = d.toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit" });
  return windowS > 86400 ? `${d.toISOString().slice(5, 10)} ${time}` : time;
}

/** A round upper bound for the y axis whose half is round too: 1, 2, 4, 5 × 10^n. */
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v * 1.1));
  for (const m of [1, 2, 4, 5, 10]) if (m * p >= v * 1.1) return m * p;
  return 10 * p;
}
