// One session: its configuration, runtime status, figures, start/stop/delete, and its
// event log (newest first, paged). Sources: /v1/sessions/{id}, /v1/sessions/{id}/events,
// /metrics.

import { api } from "../api.js";
import {
  card,
  fmtAgo,
  fmtBytes,
  fmtCount,
  fmtRate,
  fmtSeconds,
  fmtTime,
  h,
  kv,
  orNR,
  rateOrNR,
  replace,
  stateBadge,
  table,
  td,
} from "../dom.js";

const PAGE = 50;

export function mount(root, ctx) {
  const id = Number(ctx.id);
  const title = h("h1", { class: "page-title" }, `Session #${id}`);
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const controls = h("div", { class: "toolbar" });
  const statusBody = h("div", { class: "card-body" });
  const figuresBody = h("div", { class: "card-body" });
  const configBody = h("div", { class: "card-body" });
  const events = table(["When", "Kind", "Reason", "Details"], "events-table");
  events.el.querySelector("table").id = "events-table";
  const more = h("button", { type: "button", class: "btn btn-small", hidden: true }, "Load older events");
  const eventsInfo = h("p", { class: "muted" });

  root.replaceChildren(
    h("p", { class: "crumbs" }, h("a", { href: "#/sessions" }, "← Sessions")),
    title,
    pageError,
    controls,
    h(
      "div",
      { class: "grid" },
      card("Status", statusBody),
      card("Figures", figuresBody),
      card("Configuration", configBody),
    ),
    card("Event log", eventsInfo, events.el, more),
  );

  let session = null;
  let shown = PAGE; // how many events the operator asked to see
  let armedDelete = null;

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };

  const renderStatus = () => {
    const s = session;
    const st = s.status;
    replace(
      statusBody,
      kv([
        ["Wanted", s.desired_state],
        ["State", stateBadge(st.state)],
        [
          "Reason",
          st.reason ? h("span", { class: st.state === "failed" ? "error-text" : "" }, st.reason) : "—",
        ],
        ["Since", st.since ? `${fmtTime(st.since)} (${fmtAgo(st.since)})` : "—"],
        [
          "Topics",
          st.topics.length
            ? h(
                "span",
                { class: "chips" },
                st.topics.map((t) => h("code", {}, t)),
              )
            : "none held",
        ],
      ]),
    );
  };

  const renderFigures = () => {
    const f = ctx.metrics.session(id);
    const why = "the runtime reports no per-session metrics";
    replace(
      figuresBody,
      kv([
        ["Messages/s", rateOrNR(f.rate, f.reported, fmtRate, why)],
        ["Bytes/s", rateOrNR(f.byteRate, f.reported, (v) => `${fmtBytes(v)}/s`, why)],
        ["RTT", orNR(f.rtt, fmtSeconds, why)],
        ["Reconnects", orNR(f.reconnects, fmtCount, why)],
        ["Gaps", orNR(f.gaps, fmtCount, why)],
      ]),
    );
  };

  const renderConfig = () => {
    const s = session;
    replace(
      configBody,
      kv([
        ["URL", h("code", { class: "wrap" }, s.url)],
        ["Dialect", s.dialect],
        ["Transport", s.transport + (s.port_id ? ` (port #${s.port_id})` : "")],
        [
          "TLS",
          s.url.startsWith("wss://")
            ? `verify ${s.tls_verify ? "on" : "OFF"}${s.tls_server_name ? `, SNI ${s.tls_server_name}` : ""}${s.tls_ca_file ? `, CA ${s.tls_ca_file}` : ""}`
            : "none (ws://)",
        ],
        ["Heartbeat", `every ${s.heartbeat_interval_s} s, dead after ${s.heartbeat_timeout_s} s`],
        [
          "Reconnect",
          `${s.reconnect_initial_delay_s} s → ${s.reconnect_max_delay_s} s (×${s.reconnect_multiplier}, jitter ${s.reconnect_jitter}), ${s.reconnect_max_attempts ?? "unlimited"} attempts`,
        ],
        ["Created", fmtTime(s.created_at)],
        ["Updated", fmtTime(s.updated_at)],
      ]),
    );
  };

  const renderControls = () => {
    const s = session;
    const verb = s.desired_state === "running" ? "stop" : "start";
    const del = h(
      "button",
      { type: "button", class: "btn btn-danger", dataset: { action: "delete" } },
      armedDelete ? "Confirm delete" : "Delete",
    );
    del.addEventListener("click", async () => {
      // Two clicks within 5 s, instead of a blocking confirm() dialog.
      if (!armedDelete) {
        armedDelete = setTimeout(() => {
          armedDelete = null;
          renderControls();
        }, 5000);
        renderControls();
        return;
      }
      clearTimeout(armedDelete);
      armedDelete = null;
      try {
        await api(`/v1/sessions/${id}`, { method: "DELETE" });
        ctx.navigate("#/sessions");
      } catch (err) {
        showError(err);
        renderControls();
      }
    });
    replace(
      controls,
      h(
        "button",
        {
          type: "button",
          class: `btn ${verb === "start" ? "btn-primary" : ""}`,
          dataset: { action: verb },
          onclick: async (event) => {
            event.currentTarget.disabled = true;
            try {
              await api(`/v1/sessions/${id}/${verb}`, { method: "POST" });
              showError(null);
            } catch (err) {
              showError(err);
            }
            await load();
          },
        },
        verb === "start" ? "Start" : "Stop",
      ),
      del,
      s.desired_state === "running"
        ? h("span", { class: "muted" }, "Deleting stops the session first.")
        : null,
    );
  };

  const loadEvents = async () => {
    const page = await api(`/v1/sessions/${id}/events?limit=${Math.min(shown, 500)}`);
    events.tbody.replaceChildren(
      ...page.data.map((e) =>
        h(
          "tr",
          { dataset: { kind: e.kind } },
          td("When", h("time", { datetime: e.at, title: e.at }, fmtTime(e.at))),
          td("Kind", h("span", { class: `event-kind kind-${e.kind.replace(/[^a-z_]/gi, "")}` }, e.kind)),
          td("Reason", e.reason || "—"),
          td(
            "Details",
            Object.keys(e.details || {}).length
              ? h("code", { class: "wrap" }, JSON.stringify(e.details))
              : "—",
          ),
        ),
      ),
    );
    eventsInfo.textContent = page.count
      ? `${page.data.length} of ${page.count} events, newest first.`
      : "No events yet.";
    more.hidden = page.data.length >= page.count || shown >= 500;
  };

  async function load() {
    try {
      session = await api(`/v1/sessions/${id}`);
      title.textContent = session.name;
      document.title = `${session.name} · wsgw`;
      renderStatus();
      renderConfig();
      renderControls();
      renderFigures();
      await loadEvents();
      showError(null);
    } catch (err) {
      if (err.status === 404) {
        replace(
          root,
          h("p", { class: "crumbs" }, h("a", { href: "#/sessions" }, "← Sessions")),
          h(
            "section",
            { class: "card" },
            h("h2", {}, "Session not found"),
            h("p", { class: "error-text" }, err.message),
          ),
        );
        clearInterval(timer);
      } else if (err.status !== 401 && err.status !== 403) showError(err);
    }
  }

  more.addEventListener("click", () => {
    shown += PAGE;
    loadEvents().catch(showError);
  });
  const onTick = () => session && renderFigures();
  ctx.metrics.addEventListener("tick", onTick);
  load();
  const timer = setInterval(load, 3000);
  return () => {
    clearInterval(timer);
    clearTimeout(armedDelete);
    ctx.metrics.removeEventListener("tick", onTick);
  };
}
