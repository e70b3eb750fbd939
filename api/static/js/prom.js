// A parser for the Prometheus text exposition format (what /metrics serves), and the
// arithmetic the dashboard does on it: counter rates and histogram quantiles.

/**
 * Parse exposition text into { types: Map(family -> type), samples: Map(name -> [{labels, value}]) }.
 * Sample names are kept as written (with _total, _bucket, _sum, _count suffixes).
 */
export function parsePrometheus(text) {
  const types = new Map();
  const samples = new Map();
  for (const rawLine of text.split("\n")) {
    const line = rawLine.trim();
    if (!line) continue;
    if (line.startsWith("#")) {
      const m = /^#\s+TYPE\s+(\S+)\s+(\S+)/.exec(line);
      if (m) types.set(m[1], m[2]);
      continue;
    }
    const parsed = parseSample(line);
    if (!parsed) continue; // a line we do not understand is skipped, not fatal
    let list = samples.get(parsed.name);
    if (!list) samples.set(parsed.name, (list = []));
    list.push({ labels: parsed.labels, value: parsed.value });
  }
  return { types, samples };
}

function parseSample(line) {
  const nameMatch = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
  if (!nameMatch) return null;
  const name = nameMatch[0];
  let i = name.length;
  const labels = {};
  if (line[i] === "{") {
    i += 1;
    // label="value" pairs; values escape \\, \" and \n.
    while (i < line.length && line[i] !== "}") {
      const keyMatch = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"/.exec(line.slice(i));
      if (!keyMatch) return null;
      i += keyMatch[0].length;
      let value = "";
      while (i < line.length && line[i] !== '"') {
        if (line[i] === "\\" && i + 1 < line.length) {
          const next = line[i + 1];
          value += next === "n" ? "\n" : next;
          i += 2;
        } else {
          value += line[i];
          i += 1;
        }
      }
      i += 1; // closing quote
      labels[keyMatch[1]] = value;
      while (line[i] === "," || line[i] === " ") i += 1;
    }
    i += 1; // closing brace
  }
  const rest = line.slice(i).trim().split(/\s+/);
  const value = parseValue(rest[0]);
  if (value === null) return null;
  return { name, labels, value };
}

function parseValue(text) {
  if (text === undefined) return null;
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  const v = Number(text);
  return Number.isNaN(v) ? null : v;
}

/**
 * The samples of a metric: counters are found by their base name or with _total.
 * Returns [] when the server does not report it.
 */
export function find(snapshot, name) {
  if (!snapshot) return [];
  return snapshot.samples.get(name) || snapshot.samples.get(`${name}_total`) || [];
}

/** Whether the exposition declares the metric (a # TYPE line), even with no sample yet:
 * a hub with no consumer still declares wsgw_consumer_lag. */
export function declared(snapshot, name) {
  return Boolean(snapshot) && (snapshot.types.has(name) || snapshot.types.has(name.replace(/_total$/, "")));
}

/** Whether any of the names is reported at all. */
export function reported(snapshot, ...names) {
  return names.some((n) => find(snapshot, n).length > 0);
}

/** Sum of the samples whose labels match `where` (a subset of labels); null if none. */
export function sum(snapshot, name, where = {}) {
  let total = null;
  for (const s of find(snapshot, name)) {
    if (matches(s.labels, where)) total = (total ?? 0) + s.value;
  }
  return total;
}

/** Samples grouped by one label's value: { "3": 120.0, ... } (summed over other labels). */
export function byLabel(snapshot, name, label, where = {}) {
  const out = {};
  for (const s of find(snapshot, name)) {
    if (!(label in s.labels) || !matches(s.labels, where)) continue;
    out[s.labels[label]] = (out[s.labels[label]] ?? 0) + s.value;
  }
  return out;
}

function matches(labels, where) {
  return Object.entries(where).every(([k, v]) => labels[k] === v);
}

/**
 * Per-second rate of a counter between two snapshots; a counter that went down was reset
 * (a restart), so its new value is the increase. null when either side lacks it.
 */
export function rate(prev, cur, dtSeconds, name, where = {}) {
  const a = sum(prev, name, where);
  const b = sum(cur, name, where);
  if (a === null || b === null || dtSeconds <= 0) return null;
  const delta = b >= a ? b - a : b;
  return delta / dtSeconds;
}

/**
 * Histogram quantile over an interval, like PromQL's histogram_quantile(q, rate(...)):
 * bucket counts of `cur` minus those of `prev` (summed over every other label), then linear
 * interpolation inside the bucket that holds the q-th observation. null when no
 * observation fell in the interval.
 */
export function histogramQuantile(q, prev, cur, name, where = {}) {
  const buckets = new Map();
  const add = (snapshot, sign) => {
    for (const s of find(snapshot, `${name}_bucket`)) {
      if (!matches(s.labels, where)) continue;
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      buckets.set(le, (buckets.get(le) ?? 0) + sign * s.value);
    }
  };
  add(cur, 1);
  if (prev) add(prev, -1);
  const sorted = [...buckets.entries()].sort((x, y) => x[0] - y[0]);
  if (sorted.length === 0) return null;
  const total = sorted[sorted.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [le, count] of sorted) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound; // above the highest finite bucket
      const inBucket = count - lowerCount;
      return inBucket > 0 ? lowerBound + ((le - lowerBound) * (rank - lowerCount)) / inBucket : le;
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}
