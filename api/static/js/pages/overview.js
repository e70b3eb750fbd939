// Overview: the engine's state, dataplane load (lcores, fast/slow path), ports and their
// counters, and whether the host is ready for DPDK (hugepages, isolated CPUs, NICs).
// Sources: /readyz (engine, database), /metrics (load, counters), /v1/ports, /v1/host,
// /v1/host/nics. What a source does not report is shown as "not reported".

import { api, apiAll, auth, onApi } from "../api.js";
import { metricName } from "../metrics.js";
import {
  card,
  fmtBytes,
  fmtCount,
  fmtCpuList,
  fmtPercent,
  fmtRate,
  h,
  kv,
  notReported,
  orNR,
  rateOrNR,
  replace,
  stateBadge,
  syncRows,
  table,
  td,
} from "../dom.js";

const wide = (el) => {
  el.classList.add("wide");
  return el;
};

export function mount(root, ctx) {
  const engineBody = h("div", { class: "card-body" }, h("p", { class: "muted" }, "Asking /readyz…"));
  const loadBody = h("div", { class: "card-body" });
  const portsBody = h("div", { class: "card-body" });
  const hostBody = h("div", { class: "card-body" });
  const nicsBody = h("div", { class: "card-body" });
  const refreshHost = h("button", { type: "button", class: "btn btn-small" }, "Refresh");
  const hostCard = card("Host readiness", hostBody);
  hostCard.querySelector("h2").append(" ", refreshHost);

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Overview"),
    h(
      "div",
      { class: "grid" },
      card("Engine", engineBody),
      card("Dataplane load", loadBody),
      hostCard,
      wide(card("Ports", portsBody)),
      wide(card("NICs", nicsBody)),
    ),
  );

  const admin = auth.has("admin");
  const needAdmin = (body) =>
    replace(body, h("p", { class: "muted" }, "Needs the 'admin' scope, which this token lacks."));

  // ---- engine ----
  const renderEngine = () => {
    const ready = ctx.ready;
    if (!ready) {
      replace(engineBody, h("p", { class: "error-text" }, "/readyz does not answer: the API may be down."));
      return;
    }
    const e = ready.engine;
    if (!e) {
      // /readyz says more than {status} to an admin only (it may name database hosts).
      replace(
        engineBody,
        kv([["Ready", ready.status === "ready" ? "yes" : h("span", { class: "error-text" }, "no")]]),
        h("p", { class: "muted" }, "The engine's and the database's state need the 'admin' scope."),
      );
      return;
    }
    const details = Object.entries(e.details || {}).map(([k, v]) => [
      k,
      typeof v === "object" ? JSON.stringify(v) : String(v),
    ]);
    replace(
      engineBody,
      kv([
        ["State", stateBadge(e.state)],
        ["Reason", e.reason || h("span", { class: "muted" }, "—")],
        ["Ready", ready.ready ? "yes" : h("span", { class: "error-text" }, "no")],
        [
          "Database",
          ready.database === "ok"
            ? "ok"
            : h(
                "span",
                { class: "error-text" },
                `${ready.database}${ready.database_error ? `: ${ready.database_error}` : ""}`,
              ),
        ],
        ...details,
      ]),
      e.state === "detached"
        ? h(
            "p",
            { class: "notice" },
            `No dataplane is attached (${e.reason || "no reason given"}): sessions and ports are recorded, not connected.`,
          )
        : e.state === "failed"
          ? h("p", { class: "error-text" }, `The engine failed: ${e.reason || "no reason given"}.`)
          : null,
    );
  };

  // ---- dataplane load (metrics) ----
  const renderLoad = () => {
    const m = ctx.metrics;
    if (m.error && !m.latest) {
      replace(loadBody, h("p", { class: "error-text" }, `/metrics: ${m.error.message}`));
      return;
    }
    const lcores = m.lcores();
    const paths = m.pathTotals();
    const point = m.points.at(-1) || {};
    const lcoreList = lcores
      ? h(
          "ul",
          { class: "bars", dataset: { figure: "lcores" } },
          Object.entries(lcores)
            .sort((a, b) => Number(a[0]) - Number(b[0]))
            .map(([lcore, ratio]) =>
              h(
                "li",
                {},
                h("span", { class: "bar-label" }, `lcore ${lcore}`),
                h("meter", { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0.2, value: ratio }),
                h("span", { class: "bar-value" }, fmtPercent(ratio)),
              ),
            ),
        )
      : notReported("the runtime reports no lcore_busy_ratio");
    let split = notReported("the runtime reports no fastpath_segments / slowpath_segments");
    if (paths && paths.fast !== null && paths.slow !== null) {
      const total = paths.fast + paths.slow;
      split = h(
        "span",
        { dataset: { figure: "path-split" } },
        total > 0
          ? `${fmtPercent(paths.fast / total)} fast · ${fmtPercent(paths.slow / total)} slow`
          : "no segments yet",
        point.fastRate != null
          ? h(
              "span",
              { class: "muted" },
              ` (${fmtRate(point.fastRate)} fast, ${fmtRate(point.slowRate ?? 0)} slow)`,
            )
          : null,
      );
    }
    replace(
      loadBody,
      kv([
        ["lcore load", lcoreList],
        ["Fast / slow path", split],
        [
          "Messages/s",
          rateOrNR(
            point.msgRate,
            metricName(m.latest, "sessionMessages") !== null,
            fmtRate,
            "the runtime reports no session_messages",
          ),
        ],
      ]),
    );
  };

  // ---- ports ----
  const portsTable = table(["Port", "Device", "Address", "State", "RX pkt/s", "TX pkt/s", "RX dropped"]);
  let ports = [];
  const renderPorts = () => {
    if (!admin) return needAdmin(portsBody);
    if (ports.length === 0) {
      replace(portsBody, h("p", { class: "muted" }, "No ports configured (POST /v1/ports)."));
      return;
    }
    if (!portsBody.contains(portsTable.el)) replace(portsBody, portsTable.el);
    const rows = ports.map((p) => ({ p, f: ctx.metrics.port(p.id) }));
    syncRows(
      portsTable.tbody,
      rows,
      (r) => r.p.id,
      ({ p, f }) =>
        h(
          "tr",
          {},
          td("Port", h("strong", {}, p.name)),
          td("Device", h("code", {}, p.device)),
          td("Address", `${p.ipv4} / ${p.netmask}${p.gateway ? ` via ${p.gateway}` : ""}`),
          td("State", [
            stateBadge(p.status.state),
            p.status.reason ? h("div", { class: "reason" }, p.status.reason) : null,
          ]),
          td("RX pkt/s", rateOrNR(f.rxPps, f.rxPackets !== null, fmtRate), "num"),
          td("TX pkt/s", rateOrNR(f.txPps, f.txPackets !== null, fmtRate), "num"),
          td("RX dropped", orNR(f.rxDropped, fmtCount), "num"),
        ),
      ({ p, f }) => JSON.stringify([p, f]),
    );
  };

  // ---- host readiness ----
  const check = (ok, label, text) =>
    h(
      "li",
      { class: ok ? "check-ok" : "check-bad", dataset: { check: label } },
      h("span", { class: "check-mark", "aria-label": ok ? "ready" : "not ready" }, ok ? "✓" : "✗"),
      h("span", {}, h("strong", {}, `${label}: `), text),
    );
  const renderHost = (host, nics) => {
    const pools = host.hugepages.filter((p) => p.node === null || p.node === undefined);
    const reserved = pools.filter((p) => p.total > 0);
    const bound = nics.filter((n) => n.bound_to_dpdk);
    const bindable = nics.filter((n) => n.bindable && !n.bound_to_dpdk);
    const hugeText = reserved.length
      ? reserved.map((p) => `${p.total} × ${fmtBytes(p.size_kb * 1024)} (${p.free} free)`).join(", ")
      : "none reserved: DPDK would run without hugepages (--no-huge)";
    replace(
      hostBody,
      h(
        "ul",
        { class: "checks" },
        check(reserved.length > 0, "Hugepages", hugeText),
        check(
          host.cpus.isolated.length > 0,
          "Isolated CPUs",
          host.cpus.isolated.length
            ? `${fmtCpuList(host.cpus.isolated)} of ${fmtCpuList(host.cpus.online)}`
            : `none of ${fmtCpuList(host.cpus.online)}${host.cmdline.suggestion ? ` — ${host.cmdline.suggestion}` : ""}`,
        ),
        check(
          bound.length > 0,
          "NICs bound to DPDK",
          bound.length
            ? bound.map((n) => `${n.address} (${n.driver})`).join(", ")
            : `none${bindable.length ? `; ${bindable.length} bindable: ${bindable.map((n) => n.address).join(", ")}` : ""}`,
        ),
        check(
          host.iommu_groups > 0 || host.vfio_noiommu,
          "IOMMU",
          host.iommu_groups > 0
            ? `${host.iommu_groups} groups`
            : host.vfio_noiommu
              ? "vfio no-IOMMU mode"
              : "no IOMMU groups (vfio-pci needs them)",
        ),
      ),
      kv([
        [
          "hugetlbfs",
          host.hugetlbfs_mounts.length
            ? host.hugetlbfs_mounts.map((m) => `${m.path} (${fmtBytes(m.pagesize_kb * 1024)})`).join(", ")
            : "not mounted",
        ],
        ["nohz_full", fmtCpuList(host.cpus.nohz_full)],
        ["CPUs allowed", fmtCpuList(host.cpus.allowed)],
        ["NUMA nodes", String(host.numa_nodes.length)],
        ["Missing boot params", host.cmdline.missing.length ? host.cmdline.missing.join(", ") : "none"],
      ]),
      host.warnings.length
        ? h(
            "ul",
            { class: "warnings" },
            host.warnings.map((w) => h("li", {}, w)),
          )
        : null,
    );
    if (nics.length === 0) {
      replace(nicsBody, h("p", { class: "muted" }, "No PCI network devices found."));
      return;
    }
    const t = table(["PCI", "Device", "Driver", "DPDK", "In use"]);
    for (const n of nics) {
      t.tbody.append(
        h(
          "tr",
          {},
          td("PCI", h("code", {}, n.address)),
          td("Device", [
            n.device_name || `${n.vendor_id}:${n.device_id}`,
            n.interfaces.length
              ? h("div", { class: "reason" }, n.interfaces.map((i) => i.name).join(", "))
              : null,
          ]),
          td("Driver", n.driver || "none"),
          td(
            "DPDK",
            n.bound_to_dpdk
              ? stateBadge("up")
              : n.bindable
                ? "bindable"
                : h("span", { title: n.bind_refusal || "" }, "not bindable"),
          ),
          td(
            "In use",
            n.in_use
              ? h(
                  "span",
                  { title: n.in_use_reason || "" },
                  `yes${n.in_use_reason ? `: ${n.in_use_reason}` : ""}`,
                )
              : "no",
          ),
        ),
      );
    }
    replace(nicsBody, t.el);
  };

  let hostFailed = false; // the last host load failed: load again as soon as the API answers
  const loadHost = async () => {
    if (!admin) {
      needAdmin(hostBody);
      needAdmin(nicsBody);
      return;
    }
    refreshHost.disabled = true;
    try {
      const [host, nics] = await Promise.all([api("/v1/host"), api("/v1/host/nics")]);
      hostFailed = false;
      renderHost(host, nics.data);
    } catch (err) {
      hostFailed = true;
      replace(hostBody, h("p", { class: "error-text" }, `/v1/host: ${err.message}`));
      replace(nicsBody, h("p", { class: "error-text" }, `/v1/host/nics: ${err.message}`));
    } finally {
      refreshHost.disabled = false;
    }
  };

  const loadPorts = async () => {
    if (!admin) return renderPorts();
    try {
      ports = await apiAll("/v1/ports");
      renderPorts();
    } catch (err) {
      replace(portsBody, h("p", { class: "error-text" }, `/v1/ports: ${err.message}`));
    }
  };

  refreshHost.addEventListener("click", loadHost);
  const onTick = () => {
    renderLoad();
    renderPorts();
  };
  ctx.metrics.addEventListener("tick", onTick);
  document.addEventListener("wsgw:ready", renderEngine);
  renderEngine();
  renderLoad();
  loadHost();
  loadPorts();
  const timer = setInterval(loadPorts, 5000);
  const hostTimer = setInterval(loadHost, 30000);
  // The API is back (after a restart or an outage): the host cards do not wait 30 s.
  const stopReachable = onApi("reachable", () => {
    if (hostFailed) loadHost();
  });
  return () => {
    stopReachable();
    ctx.metrics.removeEventListener("tick", onTick);
    document.removeEventListener("wsgw:ready", renderEngine);
    clearInterval(timer);
    clearInterval(hostTimer);
  };
}
