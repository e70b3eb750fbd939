// The engine's and the NICs' counters (/v1/engine/ports) as figures with units: totals,
// rates between two answers (over the server's monotonic clock) and derived ratios.
// Every counter a port reports is shown; one this file does not know is shown as a count.

import { api } from "./api.js";
import { sum } from "./prom.js";
import { fmtBytes, fmtCount, fmtPercent, fmtSeconds, h, kv, measuring, notReported } from "./dom.js";

// [counter, label, unit]; unit: packets | bytes | polls | segments | frames | count
export const NIC_FIGURES = [
  ["rx_packets", "RX", "packets"],
  ["tx_packets", "TX", "packets"],
  ["rx_bytes", "RX bytes", "bytes"],
  ["tx_bytes", "TX bytes", "bytes"],
  ["rx_missed", "RX missed (queue full)", "packets"],
  ["rx_nombuf", "RX no mbuf", "packets"],
  ["rx_errors", "RX errors", "packets"],
  ["rx_truncated", "RX truncated", "packets"],
  ["tx_errors", "TX errors", "packets"],
  ["tx_dropped", "TX dropped", "packets"],
  ["tx_nombuf", "TX no mbuf", "packets"],
  ["tx_oversize", "TX oversize", "packets"],
];

export const ENGINE_FIGURES = [
  ["c_rx_frames", "RX frames", "frames"],
  ["c_rx_bursts", "RX bursts", "bursts"],
  ["c_fast_segments", "Fast-path segments", "segments"],
  ["c_fast_bytes", "Fast-path bytes", "bytes"],
  ["c_slow_frames", "Slow-path frames (C)", "frames"],
  ["slow_frames", "Slow-path frames (Python)", "frames"],
  ["tx_frames", "TX frames (Python)", "frames"],
  ["c_acks_sent", "ACKs sent", "segments"],
  ["c_fast_acks", "Fast-path ACKs taken", "segments"],
  ["c_tx_data_segments", "TX data segments", "segments"],
  ["c_tx_data_bytes", "TX data bytes", "bytes"],
  ["c_polls", "Engine poll calls", "polls"],
  ["c_empty_polls", "Empty RX bursts", "bursts"],
  ["c_sleeps", "Back-off sleeps", "count"],
  ["c_rx_wakes", "Woken by RX", "count"],
  ["loops", "Engine loops", "count"],
  ["commands", "Commands", "count"],
  ["c_rx_to_ring_bursts", "Bursts to the ring", "bursts"],
  ["c_dropped_slow_full", "Dropped: slow arena full", "frames"],
  ["c_tx_dropped", "TX dropped", "frames"],
  ["c_bad_ip_checksum", "Bad IP checksum", "frames"],
  ["c_bad_tcp_checksum", "Bad TCP checksum", "frames"],
  ["c_not_ipv4", "Not IPv4", "frames"],
  ["c_not_for_us", "Not for us", "frames"],
  ["service_errors", "Service errors", "count"],
  ["c_bench_dropped", "Bench dropped", "frames"],
];
// Gauges (a level, not a counter) and counters folded into derived figures.
const ENGINE_GAUGES = [
  ["flows", "Fast-path flows"],
  ["connections", "TCP connections"],
];
const FOLDED = new Set(["c_sleep_ns", "c_rx_to_ring_ns_sum", "c_rx_to_ring_ns_max"]);

function total(value, unit) {
  if (unit === "bytes") return fmtBytes(value);
  return `${fmtCount(value)} ${unit === "count" ? "" : unit}`.trim();
}

function perSecond(value, unit) {
  if (unit === "bytes") return `${fmtBytes(value)}/s`;
  return unit === "count" ? `${fmtCount(value)}/s` : `${fmtCount(value)} ${unit}/s`;
}

/** Polls /v1/engine/ports; keeps the last two answers per port to measure rates. */
export class PortCounters extends EventTarget {
  constructor({ interval = 1000 } = {}) {
    super();
    this.interval = interval;
    this.prev = new Map(); // port id -> {at, row}
    this.cur = new Map();
    this.error = null;
    this.loaded = false;
    this.timer = null;
    this.stopped = true;
  }

  /** Starts polling; returns the function that stops it. */
  start() {
    this.stopped = false;
    this.poll();
    return () => {
      this.stopped = true;
      clearTimeout(this.timer);
    };
  }

  async poll() {
    try {
      const answer = await api("/v1/engine/ports");
      for (const row of answer.data) {
        const old = this.cur.get(row.port_id);
        if (old) this.prev.set(row.port_id, old);
        this.cur.set(row.port_id, { at: answer.monotonic, row });
      }
      this.error = null;
      this.loaded = true;
    } catch (err) {
      this.error = err;
    }
    if (this.stopped) return;
    this.dispatchEvent(new Event("tick"));
    this.timer = setTimeout(() => this.poll(), this.interval);
  }

  row(portId) {
    return this.cur.get(portId)?.row ?? null;
  }

  /** A counter's rate per second over the last two answers (null: unknown yet). */
  rate(portId, source, key) {
    const a = this.prev.get(portId);
    const b = this.cur.get(portId);
    const x = a?.row[source]?.[key];
    const y = b?.row[source]?.[key];
    if (x == null || y == null || !(b.at > a.at)) return null;
    return Math.max(0, y - x) / (b.at - a.at);
  }

  /** The change of a counter over the last two answers (null: unknown). */
  delta(portId, source, key) {
    const x = this.prev.get(portId)?.row[source]?.[key];
    const y = this.cur.get(portId)?.row[source]?.[key];
    return x == null || y == null ? null : Math.max(0, y - x);
  }

  /** The engine thread's CPU use over the last two answers, 0..1 (its lcore's load). */
  cpuLoad(portId) {
    const a = this.prev.get(portId);
    const b = this.cur.get(portId);
    if (a?.row.cpu_seconds == null || b?.row.cpu_seconds == null || !(b.at > a.at)) return null;
    return Math.max(0, b.row.cpu_seconds - a.row.cpu_seconds) / (b.at - a.at);
  }

  /** The fast path's share of the received segments since the engine started, or null. */
  fastShare(portId) {
    const e = this.row(portId)?.engine;
    if (!e || e.c_fast_segments == null || e.c_slow_frames == null) return null;
    const all = e.c_fast_segments + e.c_slow_frames;
    return all > 0 ? { fast: e.c_fast_segments / all, slow: e.c_slow_frames / all } : null;
  }
}

const fig = (name, ...content) => h("span", { class: "figure", dataset: { figure: name } }, ...content);
const sep = () => h("span", { class: "muted" }, " · ");

/** "12.3k packets · 1.2k packets/s": a counter's total and its rate. */
function counterValue(pc, portId, source, key, unit) {
  const value = pc.row(portId)?.[source]?.[key];
  if (value == null) return notReported();
  const r = pc.rate(portId, source, key);
  return [total(value, unit), sep(), fig(`${key}-rate`, r == null ? measuring() : perSecond(r, unit))];
}

/**
 * One port's engine figures: {headline, counters} (two key/value lists), or null when the
 * port has no engine. headline: the derived ones (load, ratios, latencies, gauges);
 * counters: every counter with its total and rate, those this file does not know included.
 * metrics: the last parsed /metrics (for the gateway's wsgw_engine_busy_ratio), or null.
 */
export function engineFigures(pc, portId, metrics = null) {
  const row = pc.row(portId);
  const e = row?.engine;
  if (!e) return null;
  const load = pc.cpuLoad(portId);
  // c_empty_polls counts RX bursts that brought nothing (several per poll call).
  const empty = pc.delta(portId, "engine", "c_empty_polls");
  const asleep = pc.rate(portId, "engine", "c_sleep_ns");
  const bursts = pc.delta(portId, "engine", "c_rx_to_ring_bursts");
  const ringNs = pc.delta(portId, "engine", "c_rx_to_ring_ns_sum");
  const rxBursts = pc.delta(portId, "engine", "c_rx_bursts");
  const rxFrames = pc.delta(portId, "engine", "c_rx_frames");
  const share = pc.fastShare(portId);
  const ratio = (a, b, fmt) => (a == null || b == null ? measuring() : b > 0 ? fmt(a / b) : "idle");
  const headline = [
    ["Engine thread CPU", fig("cpu", row.cpu_seconds == null ? notReported() : load == null ? measuring() : fmtPercent(load))],
    [
      "RX bursts with frames",
      fig("busy-polls", ratio(rxBursts, rxBursts == null || empty == null ? null : rxBursts + empty, fmtPercent)),
    ],
    ["Asleep (naps asked)", fig("asleep", e.c_sleep_ns == null ? notReported() : asleep == null ? measuring() : fmtPercent(asleep / 1e9))],
    ["Frames per RX burst", fig("burst-size", ratio(rxFrames, rxBursts, (v) => `${v.toFixed(1)} frames`))],
    [
      "Fast / slow path",
      fig(
        "engine-path-split",
        share ? `${fmtPercent(share.fast)} fast · ${fmtPercent(share.slow)} slow` : "no segments yet",
      ),
    ],
    ["RX → ring, mean", fig("rx-to-ring-mean", ratio(ringNs, bursts, (ns) => fmtSeconds(ns / 1e9)))],
    [
      "RX → ring, max",
      fig("rx-to-ring-max", e.c_rx_to_ring_ns_max == null ? notReported() : fmtSeconds(e.c_rx_to_ring_ns_max / 1e9)),
    ],
  ];
  // Shown once the gateway exports it (two of its 5 s samples after the port came up).
  const busy = metrics ? sum(metrics, "wsgw_engine_busy_ratio", { port: String(portId) }) : null;
  if (busy !== null) headline.splice(1, 0, ["lcore busy (5 s)", fig("lcore-busy", fmtPercent(busy))]);
  for (const [key, label] of ENGINE_GAUGES) {
    if (e[key] != null) headline.push([label, fig(key, fmtCount(e[key]))]);
  }
  const counters = [];
  const known = new Set([...ENGINE_FIGURES, ...ENGINE_GAUGES].map(([k]) => k));
  for (const [key, label, unit] of ENGINE_FIGURES) {
    if (e[key] != null) counters.push([label, fig(key, counterValue(pc, portId, "engine", key, unit))]);
  }
  for (const key of Object.keys(e).sort()) {
    if (known.has(key) || FOLDED.has(key)) continue;
    counters.push([key, fig(key, counterValue(pc, portId, "engine", key, "count"))]);
  }
  return { headline: kv(headline), counters: kv(counters) };
}

/** Every NIC figure of one port (rte_eth_stats and link); null when not reported. */
export function nicFigures(pc, portId) {
  const row = pc.row(portId);
  if (!row?.nic) return null;
  const rows = [];
  if (row.link) {
    rows.push([
      "Link",
      fig(
        "link",
        row.link.up ? "up" : "down",
        row.link.speed_mbps ? ` · ${fmtCount(row.link.speed_mbps)} Mb/s` : " · speed not reported",
        row.link.full_duplex ? " · full duplex" : " · half duplex",
      ),
    ]);
  }
  const known = new Set(NIC_FIGURES.map(([k]) => k));
  for (const [key, label, unit] of NIC_FIGURES) {
    if (row.nic[key] != null) rows.push([label, fig(`nic-${key}`, counterValue(pc, portId, "nic", key, unit))]);
  }
  for (const key of Object.keys(row.nic).sort()) {
    if (!known.has(key)) rows.push([key, fig(`nic-${key}`, counterValue(pc, portId, "nic", key, "count"))]);
  }
  return kv(rows);
}

/** A port's headline rates for the ports table: {rxPps, txPps, rxBps, txBps, rxDropped}. */
export function nicHeadline(pc, portId) {
  const nic = pc.row(portId)?.nic;
  if (!nic) return null;
  const dropped = ["rx_missed", "rx_nombuf", "rx_errors"].reduce((s, k) => s + (nic[k] ?? 0), 0);
  return {
    rxPps: pc.rate(portId, "nic", "rx_packets"),
    txPps: pc.rate(portId, "nic", "tx_packets"),
    rxBps: pc.rate(portId, "nic", "rx_bytes"),
    txBps: pc.rate(portId, "nic", "tx_bytes"),
    rxDropped: dropped,
  };
}
