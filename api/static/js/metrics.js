// Polls /metrics once a second and turns the samples into the figures the pages show:
// message rates, latency percentiles, per-session / per-port / per-consumer counters.
//
// The names below are the dashboard's contract with the producers of /metrics. A figure
// whose metric is absent is shown as "not reported", never as zero. Counters get
// Prometheus' _total suffix; find() accepts either spelling.
//
// The runtime's samples (gateway.runtime.Metric, exported as wsgw_dataplane_<name>):
//   name (Metric.name)        kind     labels                 shown as                  from
//   session_messages          counter  session=<id>           msgs/s per session, total LiveRuntime
//   session_bytes             counter  session=<id>           bytes/s (session detail)  LiveRuntime
//   session_rtt_seconds       gauge    session=<id>           RTT                       LiveRuntime
//   session_reconnects        counter  session=<id>           reconnects                LiveRuntime
//   session_gaps              counter  session=<id>           gaps                      LiveRuntime
//   session_topic_messages    counter  session=<id>,topic=<t> msgs/s per topic          LiveRuntime
//   message_latency_seconds   gauge    quantile=0.5|0.9|0.99  latency chart             (proposed)
//                                      [session=<id>]         (worst session if no total)
//   lcore_busy_ratio          gauge    lcore=<n>              lcore load (0..1)         (proposed)
//   fastpath_segments, slowpath_segments   counter           fast/slow path split      (proposed)
//   port_rx_packets, port_tx_packets, port_rx_bytes, port_tx_bytes,
//   port_rx_dropped           counter  port=<id>              port counters             (proposed)
// The fan-out hub's own (gateway/hub/metrics.py), per consumer name:
//   wsgw_consumer_connected{consumer}, wsgw_consumer_lag{consumer} (messages queued),
//   wsgw_consumer_delivered{consumer}, wsgw_consumer_dropped{consumer,reason},
//   wsgw_consumer_disconnects{consumer,reason}, wsgw_hub_published, wsgw_hub_batches,
//   wsgw_hub_publish_seconds.

import { api } from "./api.js";
import { byLabel, declared, find, histogramQuantile, parsePrometheus, rate, sum } from "./prom.js";

const DP = "wsgw_dataplane_";
export const NAMES = {
  sessionMessages: [`${DP}session_messages`],
  sessionBytes: [`${DP}session_bytes`],
  sessionRtt: [`${DP}session_rtt_seconds`],
  sessionReconnects: [`${DP}session_reconnects`],
  sessionGaps: [`${DP}session_gaps`],
  topicMessages: [`${DP}session_topic_messages`],
  latency: [`${DP}message_latency_seconds`],
  lcoreBusy: [`${DP}lcore_busy_ratio`],
  fastPath: [`${DP}fastpath_segments`],
  slowPath: [`${DP}slowpath_segments`],
  portRxPackets: [`${DP}port_rx_packets`],
  portTxPackets: [`${DP}port_tx_packets`],
  portRxBytes: [`${DP}port_rx_bytes`],
  portTxBytes: [`${DP}port_tx_bytes`],
  portRxDropped: [`${DP}port_rx_dropped`],
  hubPublished: ["wsgw_hub_published"],
  hubBatches: ["wsgw_hub_batches"],
  hubPublishSeconds: ["wsgw_hub_publish_seconds"],
  consumerConnected: ["wsgw_consumer_connected"],
  consumerLag: ["wsgw_consumer_lag"],
  consumerDelivered: ["wsgw_consumer_delivered"],
  consumerDropped: ["wsgw_consumer_dropped"],
  consumerDisconnects: ["wsgw_consumer_disconnects"],
  // The control plane's own, always there:
  httpRequests: ["wsgw_http_requests"],
  httpDuration: ["wsgw_http_request_duration_seconds"],
  engineState: ["wsgw_engine_state"],
};
export const QUANTILES = ["0.5", "0.9", "0.99"];
const HTTP_WINDOW = 5; // polls over which the API latency percentiles are computed
const topicKey = (session, topic) => `${session}\u0000${topic}`;

/** The first of a figure's names that the snapshot reports, or null. */
export function metricName(snapshot, key) {
  return NAMES[key].find((n) => find(snapshot, n).length > 0 || declared(snapshot, n)) || null;
}

/**
 * One per signed-in page: polls every `interval` ms and keeps `keep` derived points for
 * the charts. Dispatches "tick" (after every poll, successful or not).
 */
export class MetricsPoller extends EventTarget {
  constructor({ interval = 1000, keep = 180 } = {}) {
    super();
    this.interval = interval;
    this.keep = keep;
    this.snapshots = []; // the last HTTP_WINDOW + 1 parsed snapshots, with their time
    this.points = []; // derived figures per poll, oldest first
    this.error = null; // the last poll's ApiError, or null
    this.ticks = 0;
    this.timer = null;
    this.running = false;
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.poll();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }

  get latest() {
    return this.snapshots.at(-1)?.data ?? null;
  }

  async poll() {
    const started = performance.now();
    try {
      const text = await api("/metrics", { text: true, authRedirect: false });
      this.snapshots.push({ at: performance.now() / 1000, data: parsePrometheus(text) });
      this.snapshots = this.snapshots.slice(-(HTTP_WINDOW + 1));
      this.error = null;
    } catch (err) {
      this.error = err;
    }
    this.points.push(this.derive());
    this.points = this.points.slice(-this.keep);
    this.ticks += 1;
    this.dispatchEvent(new Event("tick"));
    if (this.running) {
      // Keep a steady cadence: the next poll is due `interval` after this one started.
      const wait = Math.max(100, this.interval - (performance.now() - started));
      this.timer = setTimeout(() => this.poll(), wait);
    }
  }

  /** The figures of this poll against the previous one (null where unknown). */
  derive() {
    const point = { t: Date.now(), ok: this.error === null };
    const n = this.snapshots.length;
    if (this.error || n === 0) return point;
    const cur = this.snapshots[n - 1];
    const prev = n > 1 ? this.snapshots[n - 2] : null;
    const first = this.snapshots[0];
    const dt = prev ? cur.at - prev.at : 0;
    const name = (key) => metricName(cur.data, key);
    /** The rate of `metric` for each value of `label` ({} without the metric). */
    const ratesBy = (metric, label) => {
      const out = {};
      if (!metric) return out;
      for (const value of Object.keys(byLabel(cur.data, metric, label))) {
        out[value] = rate(prev.data, cur.data, dt, metric, { [label]: value });
      }
      return out;
    };
    if (prev) {
      const msgs = name("sessionMessages");
      if (msgs) {
        point.msgRate = rate(prev.data, cur.data, dt, msgs);
        point.sessionRates = ratesBy(msgs, "session");
      }
      const topics = name("topicMessages");
      if (topics) {
        point.topicRates = {};
        for (const sample of find(cur.data, topics)) {
          const where = { session: sample.labels.session, topic: sample.labels.topic };
          point.topicRates[topicKey(where.session, where.topic)] = rate(prev.data, cur.data, dt, topics, where);
        }
      }
      const published = name("hubPublished");
      if (published) point.hubRate = rate(prev.data, cur.data, dt, published);
      const delivered = name("consumerDelivered");
      if (delivered) {
        point.deliveredRate = rate(prev.data, cur.data, dt, delivered);
        point.consumerRates = ratesBy(delivered, "consumer");
      }
      // Mean time the engine spends handing a batch to the hub, over the last poll.
      const pubSeconds = name("hubPublishSeconds");
      const batches = name("hubBatches");
      if (pubSeconds && batches) {
        const perS = rate(prev.data, cur.data, dt, pubSeconds);
        const batchRate = rate(prev.data, cur.data, dt, batches);
        point.hubPublishMean = batchRate > 0 ? perS / batchRate : null;
      }
      if (msgs) point.sessionByteRates = ratesBy(name("sessionBytes"), "session");
      const http = name("httpRequests");
      if (http) point.httpRate = rate(prev.data, cur.data, dt, http);
      const fast = name("fastPath");
      const slow = name("slowPath");
      if (fast) point.fastRate = rate(prev.data, cur.data, dt, fast);
      if (slow) point.slowRate = rate(prev.data, cur.data, dt, slow);
    }
    point.latency = this.latency(cur.data);
    if (first !== cur) {
      const hist = NAMES.httpDuration[0];
      point.httpP50 = histogramQuantile(0.5, first.data, cur.data, hist);
      point.httpP99 = histogramQuantile(0.99, first.data, cur.data, hist);
    }
    return point;
  }

  /** {p50, p90, p99} in seconds: the gateway-wide series, or the worst session's. */
  latency(snapshot) {
    const metric = metricName(snapshot, "latency");
    if (!metric) return null;
    const out = {};
    for (const q of QUANTILES) {
      const samples = find(snapshot, metric).filter((s) => s.labels.quantile === q);
      const total = samples.find((s) => !("session" in s.labels));
      const values = samples.map((s) => s.value).filter((v) => Number.isFinite(v));
      out[`p${Math.round(Number(q) * 100)}`] = total
        ? total.value
        : values.length
          ? Math.max(...values)
          : null;
    }
    return out;
  }

  /** A session's figures: {rate, rtt, reconnects, gaps}; null where not reported. */
  session(id) {
    const snap = this.latest;
    const where = { session: String(id) };
    const value = (key) => {
      const metric = metricName(snap, key);
      return metric ? sum(snap, metric, where) : null;
    };
    return {
      rate: this.points.at(-1)?.sessionRates?.[String(id)] ?? null,
      byteRate: this.points.at(-1)?.sessionByteRates?.[String(id)] ?? null,
      rtt: value("sessionRtt"),
      reconnects: value("sessionReconnects"),
      gaps: value("sessionGaps"),
      reported: value("sessionMessages") !== null, // this session's counter is exported
    };
  }

  /**
   * A consumer's figures, by consumer name (the hub counts per name, summed over its
   * streams): {connected, lag, deliveredRate, dropped: {reason: n}, disconnects: {reason: n}}.
   */
  consumer(name) {
    const snap = this.latest;
    const where = { consumer: String(name) };
    const value = (key) => {
      const metric = metricName(snap, key);
      return metric ? sum(snap, metric, where) : null;
    };
    const reasons = (key) => {
      const metric = metricName(snap, key);
      return metric ? byLabel(snap, metric, "reason", where) : null;
    };
    const deliveredMetric = metricName(snap, "consumerDelivered");
    return {
      reported: metricName(snap, "consumerLag") !== null,
      connected: value("consumerConnected"),
      lag: value("consumerLag"),
      delivered: deliveredMetric ? sum(snap, deliveredMetric, where) : null,
      deliveredRate: this.points.at(-1)?.consumerRates?.[String(name)] ?? null,
      dropped: reasons("consumerDropped"),
      disconnects: reasons("consumerDisconnects"),
    };
  }

  /** A topic's figures in a session: {reported, total, rate} (messages, messages/s). */
  topic(sessionId, topic) {
    const snap = this.latest;
    const metric = metricName(snap, "topicMessages");
    const where = { session: String(sessionId), topic };
    const present = metric ? find(snap, metric).some((s) => s.labels.session === where.session && s.labels.topic === topic) : false;
    return {
      reported: metric !== null,
      total: present ? sum(snap, metric, where) : null,
      rate: this.points.at(-1)?.topicRates?.[topicKey(where.session, topic)] ?? null,
    };
  }

  /** A port's figures: packet rates over the last poll and the drop counter. */
  port(id) {
    const n = this.snapshots.length;
    const cur = this.snapshots[n - 1];
    const prev = this.snapshots[n - 2];
    const where = { port: String(id) };
    const rateOf = (key) => {
      const metric = cur && metricName(cur.data, key);
      return metric && prev ? rate(prev.data, cur.data, cur.at - prev.at, metric, where) : null;
    };
    const total = (key) => {
      const metric = cur && metricName(cur.data, key);
      return metric ? sum(cur.data, metric, where) : null;
    };
    return {
      rxPps: rateOf("portRxPackets"),
      txPps: rateOf("portTxPackets"),
      rxBps: rateOf("portRxBytes"),
      txBps: rateOf("portTxBytes"),
      rxPackets: total("portRxPackets"),
      txPackets: total("portTxPackets"),
      rxDropped: total("portRxDropped"),
    };
  }

  /** {lcore: busy ratio} or null. */
  lcores() {
    const metric = metricName(this.latest, "lcoreBusy");
    return metric ? byLabel(this.latest, metric, "lcore") : null;
  }

  /** Totals of the fast and slow path counters since start, or null. */
  pathTotals() {
    const fast = metricName(this.latest, "fastPath");
    const slow = metricName(this.latest, "slowPath");
    if (!fast && !slow) return null;
    return {
      fast: fast ? sum(this.latest, fast) : null,
      slow: slow ? sum(this.latest, slow) : null,
    };
  }
}
