// Nodes (admin): the gateways of the fleet (issue #20), as every node sees them in the shared
// database: each node with its labels, heartbeat age (the database's clock), sessions owned
// (live leases) and whether it drains; who runs each session (the leases); drain and undrain
// of the node this page is served by. Source: /v1/fleet/nodes and /v1/fleet/leases
// (api/routes/fleet.py), every 2 s. A gateway that is not in a fleet answers 409: said so.

import { api } from "../api.js";
import { card, confirmButton, fmtTime, h, replace, stateBadge, syncRows, table, td } from "../dom.js";

const POLL_MS = 2000;

/** "0.4 s", "12 s", "5 min": a heartbeat's age. */
export function fmtAge(seconds) {
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

/** {venue: "binance", dpdk: "true"} -> "dpdk=true venue=binance" (sorted), or "—". */
export function fmtLabels(labels) {
  const pairs = Object.entries(labels || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return pairs.length ? pairs.map(([k, v]) => `${k}=${v}`).join(" ") : "—";
}

export function mount(root) {
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const summary = h("p", { class: "muted", id: "nodes-summary" });
  const notInFleet = h("p", { class: "muted", id: "nodes-not-in-fleet", hidden: true });
  const nodes = table(["Node", "Labels", "Heartbeat", "Sessions", "Draining", "Started"]);
  nodes.el.querySelector("table").id = "nodes-table";
  const leases = table(["Session", "Node", "Generation", "Lease"]);
  leases.el.querySelector("table").id = "leases-table";
  const actions = h("div", { class: "row-actions", id: "nodes-actions" });

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Nodes"),
    pageError,
    notInFleet,
    card("Nodes of the fleet", summary, nodes.el, actions),
    card("Who runs each session", leases.el),
  );

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };

  const drain = async (path, button) => {
    button.disabled = true;
    try {
      await api(path, { method: "POST" });
      await load();
    } catch (err) {
      button.disabled = false;
      showError(err);
    }
  };

  const buildNode = (thisNode) => (n) =>
    h(
      "tr",
      { dataset: { node: n.name, alive: String(n.alive), draining: String(n.draining) } },
      td(
        "Node",
        h(
          "span",
          {},
          h("strong", {}, n.name),
          n.name === thisNode ? h("span", { class: "muted" }, " (this node)") : "",
        ),
      ),
      td("Labels", h("code", {}, fmtLabels(n.labels))),
      td(
        "Heartbeat",
        h(
          "span",
          { title: n.heartbeat_at, dataset: { age: n.heartbeat_age_s.toFixed(1) } },
          stateBadge(n.alive ? "up" : "down"),
          ` ${fmtAge(n.heartbeat_age_s)} ago`,
        ),
      ),
      td("Sessions", String(n.sessions), "num"),
      td("Draining", n.draining ? stateBadge("stopping") : "no"),
      td("Started", h("span", { title: n.started_at }, fmtTime(n.started_at))),
    );

  const renderActions = (thisNode, me) => {
    if (!me) {
      replace(actions);
      return;
    }
    const current = actions.querySelector("button");
    // The same state: keep the button (and a pending confirm, and the focus).
    if (current && current.dataset.draining === String(me.draining) && !current.disabled) return;
    const button = me.draining
      ? h(
          "button",
          { type: "button", class: "btn btn-small", dataset: { action: "undrain", draining: "true" } },
          `Undrain ${thisNode}`,
        )
      : confirmButton(`Drain ${thisNode}`, (b) => drain("/v1/fleet/drain", b), {
          class: "btn btn-small btn-quiet",
          dataset: { action: "drain", draining: "false" },
          title: "this node takes no new sessions and hands its own over, one per tick",
        });
    if (me.draining) button.addEventListener("click", () => drain("/v1/fleet/undrain", button));
    replace(actions, button);
  };

  const load = async () => {
    let listed;
    let owned;
    try {
      [listed, owned] = await Promise.all([api("/v1/fleet/nodes"), api("/v1/fleet/leases")]);
    } catch (err) {
      if (err.status === 409) {
        showError(null);
        notInFleet.hidden = false;
        replace(notInFleet, `This gateway is not in a fleet: ${err.message}`);
        summary.textContent = "";
        syncRows(nodes.tbody, [], String, () => h("tr"), String);
        syncRows(leases.tbody, [], String, () => h("tr"), String);
        renderActions(null, null);
        return;
      }
      showError(err);
      return;
    }
    showError(null);
    notInFleet.hidden = true;
    const alive = listed.data.filter((n) => n.alive).length;
    summary.textContent =
      `${listed.data.length} node(s), ${alive} alive; lease ${listed.lease_s} s; ` +
      `this page is served by ${listed.this_node}.`;
    // The age changes every poll: compare rows by it rounded, so a steady row is kept.
    const sig = (n) => JSON.stringify({ ...n, heartbeat_age_s: Math.round(n.heartbeat_age_s * 2) });
    syncRows(nodes.tbody, listed.data, (n) => n.name, buildNode(listed.this_node), sig);
    syncRows(
      leases.tbody,
      owned.data,
      (x) => x.session_id,
      (x) =>
        h(
          "tr",
          { dataset: { session: String(x.session_id), node: x.node } },
          td("Session", h("a", { href: `#/sessions/${x.session_id}` }, String(x.session_id))),
          td("Node", x.node),
          td("Generation", String(x.generation), "num"),
          td("Lease", x.live ? stateBadge("active") : stateBadge("closed")),
        ),
      (x) => JSON.stringify({ ...x, expires_at: null }),
    );
    renderActions(listed.this_node, listed.data.find((n) => n.name === listed.this_node));
  };

  load();
  const timer = setInterval(load, POLL_MS);
  return () => clearInterval(timer);
}
