// Consumers (admin): every reader of the hub. The open /v1/stream consumers with their lag,
// drops and a force-close; the NATS sink; the shared-memory ring with its reader table (a
// reader of any process with its lag, drops, heartbeat and a force-close; the gateway's own
// are closed through their stream), what the gateway's own readers are for, and the other
// processes that map the ring without a slot (by pid: no lag is known for them). Source:
// /v1/consumers (api/routes/consumers.py), every 2 s.

import { api } from "../api.js";
import {
  card,
  confirmButton,
  fmtAgo,
  fmtBytes,
  fmtCount,
  h,
  kv,
  replace,
  fmtTime,
  stateBadge,
  syncRows,
  table,
  td,
} from "../dom.js";

const POLL_MS = 2000;

export function mount(root) {
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const streams = table(["Id", "Consumer", "Session", "Topics", "Lag", "Dropped", "Overflow", "Since", ""]);
  streams.el.querySelector("table").id = "consumers-table";
  const streamsNote = h("p", { class: "muted", id: "consumers-empty" });
  const natsBody = h("div", { id: "consumers-nats" });
  const ringBody = h("div", { id: "consumers-ring" });
  const readers = table(["Slot", "PID", "Reader", "Command", "Next seq", "Lag", "Dropped", "Heartbeat", ""]);
  readers.el.querySelector("table").id = "ring-readers";
  const readersNote = h("p", { class: "muted", id: "ring-readers-note" });
  const followers = table(["Reader", "Next seq", "Lag", "Dropped"]);
  followers.el.querySelector("table").id = "ring-followers";
  const processes = table(["PID", "Command"]);
  processes.el.querySelector("table").id = "ring-processes";

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Consumers"),
    pageError,
    card("/v1/stream consumers", streamsNote, streams.el),
    card("Shared-memory ring", ringBody, h("h3", {}, "Readers"), readersNote, readers.el,
      h("h3", {}, "What the gateway's own readers are for"), followers.el,
      h("h3", {}, "Other processes mapping the ring (no slot: lag unknown)"), processes.el),
    card("NATS sink", natsBody),
  );

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };

  const close = async (s, button) => {
    button.disabled = true;
    try {
      await api(`/v1/consumers/${s.id}`, { method: "DELETE" });
      await load();
    } catch (err) {
      button.disabled = false;
      showError(err);
    }
  };

  const closeReader = async (r, button) => {
    button.disabled = true;
    try {
      await api(`/v1/consumers/ring/${r.slot}?pid=${r.pid}`, { method: "DELETE" });
      await load();
    } catch (err) {
      button.disabled = false;
      showError(err);
    }
  };

  const buildReader = (r) =>
    h(
      "tr",
      { dataset: { slot: String(r.slot), pid: String(r.pid), name: r.name } },
      td("Slot", String(r.slot), "num"),
      td("PID", String(r.pid), "num"),
      td("Reader", [
        h("strong", {}, r.name || "?"),
        r.in_gateway ? h("span", { class: "muted" }, " (gateway)") : "",
        r.closing ? h("span", { class: "muted", dataset: { closing: "1" } }, " closing…") : "",
      ]),
      td("Command", r.command ? h("code", {}, r.command) : h("span", { class: "muted" }, "not shown")),
      td("Next seq", fmtCount(r.next_seq), "num"),
      td("Lag", `${fmtCount(r.lag)} msg`, "num"),
      td("Dropped", h("span", { title: `lapped ${r.gaps} time(s)` }, `${fmtCount(r.dropped)} msg`), "num"),
      td("Heartbeat", h("span", { title: r.heartbeat }, fmtAgo(r.heartbeat))),
      td(
        "",
        r.in_gateway || r.closing
          ? ""
          : confirmButton("Close", (button) => closeReader(r, button), {
              class: "btn btn-small btn-quiet",
              dataset: { action: "close-reader" },
              title: "make its next read fail (the SDK raises RingEvictedError)",
            }),
        "row-actions",
      ),
    );

  const buildStream = (s) =>
    h(
      "tr",
      { dataset: { consumer: String(s.id), name: s.name } },
      td("Id", String(s.id)),
      td("Consumer", h("strong", {}, s.name)),
      td("Session", h("a", { href: `#/sessions/${s.session_id}` }, String(s.session_id))),
      td("Topics", s.topics === null ? h("span", { class: "muted" }, "every topic") : s.topics.join(", ")),
      td("Lag", `${fmtCount(s.lag)} / ${fmtCount(s.queue_size)} msg`, "num"),
      td("Dropped", `${fmtCount(s.dropped)} msg`, "num"),
      td("Overflow", s.conflation_ms ? `${s.overflow}, conflated ${s.conflation_ms} ms` : s.overflow),
      td("Since", h("span", { title: s.since }, fmtTime(s.since))),
      td(
        "",
        confirmButton("Close", (button) => close(s, button), {
          class: "btn btn-small btn-quiet",
          dataset: { action: "close" },
          title: "close the stream now (1008, naming you); the client may reconnect",
        }),
        "row-actions",
      ),
    );

  const renderRing = (ring) => {
    if (!ring) {
      replace(ringBody, h("p", { class: "muted" }, "No ring: the gateway runs without a hub."));
      syncRows(followers.tbody, [], String, () => h("tr"), String);
      syncRows(readers.tbody, [], String, () => h("tr"), String);
      readersNote.textContent = "";
      syncRows(processes.tbody, [], String, () => h("tr"), String);
      return;
    }
    const held = ring.last_seq - ring.oldest_seq + 1;
    replace(
      ringBody,
      kv([
        ["File", ring.path ? h("code", {}, ring.path) : h("span", { class: "muted" }, "private (memfd): no other process can attach")],
        ["Capacity", fmtBytes(ring.capacity_bytes)],
        ["Last seq", fmtCount(ring.last_seq)],
        ["Held", `${fmtCount(Math.max(0, held))} msg (from seq ${ring.oldest_seq})`],
        ["Asleep on its futex", `${ring.waiters} reader(s), any process`],
        ["Writer", `pid ${ring.writer_pid}`],
      ]),
    );
    readersNote.textContent = ring.readers.length
      ? `${ring.readers.length} of ${ring.max_readers} slots in use.`
      : `No reader (the table has ${ring.max_readers} slots).`;
    // A row whose Close is armed keeps its node until the second click.
    const armed = new Map(
      [...readers.tbody.querySelectorAll("button[data-armed]")].map((b) => {
        const tr = b.closest("tr");
        return [tr.dataset.key, tr.dataset.sig];
      }),
    );
    const key = (r) => `${r.slot}:${r.pid}`;
    syncRows(readers.tbody, ring.readers, key, buildReader, (r) => armed.get(key(r)) ?? JSON.stringify(r) + fmtAgo(r.heartbeat));
    syncRows(
      followers.tbody,
      ring.followers.map((f, i) => ({ ...f, i })),
      (f) => f.i,
      (f) =>
        h(
          "tr",
          { dataset: { kind: f.kind } },
          td("Reader", f.kind === "nats" ? "NATS sink" : "stream loop"),
          td("Next seq", f.next_seq === null ? "—" : String(f.next_seq), "num"),
          td("Lag", `${fmtCount(f.lag)} msg`, "num"),
          td("Dropped", `${fmtCount(f.dropped)} msg`, "num"),
        ),
      (f) => JSON.stringify(f),
    );
    syncRows(
      processes.tbody,
      ring.processes,
      (p) => p.pid,
      (p) =>
        h(
          "tr",
          { dataset: { pid: String(p.pid) } },
          td("PID", String(p.pid), "num"),
          td("Command", h("code", {}, p.command || "?")),
        ),
      (p) => JSON.stringify(p),
    );
  };

  const renderNats = (nats) => {
    if (!nats) {
      replace(natsBody, h("p", { class: "muted" }, "Not configured (nats.servers in the settings)."));
      return;
    }
    const dropped = Object.entries(nats.dropped)
      .map(([why, n]) => `${why} ${fmtCount(n)}`)
      .join(", ");
    replace(
      natsBody,
      kv([
        ["Servers", nats.servers.join(", ")],
        ["State", stateBadge(nats.connected ? "connected" : "down")],
        ["Published", `${fmtCount(nats.published)} msg`],
        ["Behind the ring", `${fmtCount(nats.pending)} msg`],
        ["Dropped", dropped || "0"],
        ["JetStream", nats.jetstream_ready ? "ready" : "off or not ready"],
        ["Last error", nats.last_error || "—"],
      ]),
    );
  };

  const load = async () => {
    try {
      const body = await api("/v1/consumers");
      showError(null);
      streamsNote.textContent = body.hub
        ? body.streams.length
          ? ""
          : "No open stream."
        : "No hub: the gateway runs without a dataplane, so nothing streams.";
      // A row whose Close is armed (asked once) keeps its node until the second click.
      const armed = new Map(
        [...streams.tbody.querySelectorAll("button[data-armed]")].map((b) => {
          const tr = b.closest("tr");
          return [tr.dataset.key, tr.dataset.sig];
        }),
      );
      const sig = (s) => armed.get(String(s.id)) ?? JSON.stringify(s);
      syncRows(streams.tbody, body.streams, (s) => s.id, buildStream, sig);
      renderRing(body.ring);
      renderNats(body.nats);
    } catch (err) {
      showError(err);
    }
  };

  load();
  const timer = setInterval(load, POLL_MS);
  return () => clearInterval(timer);
}
