// Overview: the engine's state, dataplane load (lcores, fast/slow path), ports and their
// counters, and whether the host is ready for DPDK (hugepages, isolated CPUs, NICs).
// Sources: /readyz (engine, database), /metrics (load, counters), /v1/ports, /v1/host,
// /v1/host/nics. What a source does not report is shown as "not reported".

import { api, apiAll, auth, onApi } from "../api.js";
import { engineFigures, nicFigures, nicHeadline, PortCounters } from "../figures.js";
import { metricName } from "../metrics.js";
import {
  card,
  fmtBytes,
  fmtCount,
  fmtCpuList,
  fmtPercent,
  fmtRate,
  fmtSeconds,
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

/** An engine detail as text: numbers with their thousands, yes/no, nested values as a list. */
function detailValue(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "number") return fmtCount(v);
  if (Array.isArray(v)) return v.map(String).join(", ");
  if (typeof v === "object") return kv(Object.entries(v).map(([k, x]) => [k, detailValue(x)]));
  return String(v);
}

/** The interface an af_packet vdev reads ("net_af_packet0,iface=veth1" -> "veth1"), or null. */
export function vdevInterface(device) {
  const m = /^net_af_packet[^,]*,(?:.*,)?iface=([^,]+)/.exec(device || "");
  return m ? m[1] : null;
}

/** A PCI address in its long form ("03:00.0" -> "0000:03:00.0"), or null. */
function pciAddress(device) {
  const m = /^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$/.exec((device || "").split(",")[0]);
  return m ? `${(m[1] || "0000").toLowerCase()}:${m[2].toLowerCase()}` : null;
}

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
  // An admin control: a token without the scope is not offered it (the API would refuse).
  if (auth.has("admin")) hostCard.querySelector("h2").append(" ", refreshHost);

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

  // ---- engine: profile (/v1/engine) and each port's engine (/v1/engine/ports) ----
  let profile = null;
  const counters = new PortCounters();
  const profileRows = () =>
    profile
      ? [
          ["Latency profile", h("span", { dataset: { figure: "profile" } }, profile.latency_profile)],
          ["Poll mode", profile.poll_mode],
          ["Engine CPU", profile.cpu === null || profile.cpu === undefined ? "not pinned" : `CPU ${profile.cpu}`],
          ["Poll budget", profile.budget_us === null || profile.budget_us === undefined ? "none" : fmtSeconds(profile.budget_us / 1e6)],
          ["Ring readers wait", profile.reader_wait],
        ]
      : [];
  const portEngines = () => {
    const blocks = [];
    for (const p of counterPorts()) {
      const figures = engineFigures(counters, p.port_id, ctx.metrics.latest);
      if (figures) {
        blocks.push(
          h(
            "section",
            { class: "subcard", dataset: { engine: String(p.port_id) } },
            h("h3", {}, `Engine on port ${p.name}`),
            figures.headline,
          ),
        );
      }
    }
    return blocks;
  };
  const counterPorts = () => [...counters.cur.values()].map((c) => c.row);

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
    const details = Object.entries(e.details || {})
      .filter(([k, v]) => !(/^port\d+$/.test(k) && v && typeof v === "object"))
      .map(([k, v]) => [k, detailValue(v)]);
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
        ...profileRows(),
        ...details,
      ]),
      portEngines(),
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

  // ---- dataplane load (metrics, else the engines' own counters) ----
  const renderLoad = () => {
    const m = ctx.metrics;
    const enginePorts = counterPorts().filter((p) => p.cpu_seconds !== null && p.cpu_seconds !== undefined);
    if (m.error && !m.latest && enginePorts.length === 0) {
      replace(loadBody, h("p", { class: "error-text" }, `/metrics: ${m.error.message}`));
      return;
    }
    const lcores = m.lcores();
    const paths = m.pathTotals();
    const point = m.points.at(-1) || {};
    const bar = (label, ratio) =>
      h(
        "li",
        {},
        h("span", { class: "bar-label" }, label),
        ratio === null
          ? h("span", { class: "not-reported", title: "a rate needs two polls" }, "measuring…")
          : h("meter", { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0.2, value: ratio }),
        h("span", { class: "bar-value" }, ratio === null ? "" : fmtPercent(ratio)),
      );
    let lcoreList = notReported("the runtime reports no lcore_busy_ratio and no engine CPU time");
    if (lcores) {
      lcoreList = h(
        "ul",
        { class: "bars", dataset: { figure: "lcores" } },
        Object.entries(lcores)
          .sort((a, b) => Number(a[0]) - Number(b[0]))
          .map(([lcore, ratio]) => bar(`lcore ${lcore}`, ratio)),
      );
    } else if (enginePorts.length) {
      lcoreList = h(
        "ul",
        { class: "bars", dataset: { figure: "lcores" } },
        enginePorts.map((p) => bar(`engine ${p.name}`, counters.cpuLoad(p.port_id))),
      );
    }
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
    } else if (counterPorts().some((p) => p.engine)) {
      let fast = 0;
      let slow = 0;
      for (const p of counterPorts()) {
        fast += p.engine?.c_fast_segments ?? 0;
        slow += p.engine?.c_slow_frames ?? 0;
      }
      split = h(
        "span",
        { dataset: { figure: "path-split" } },
        fast + slow > 0
          ? `${fmtPercent(fast / (fast + slow))} fast · ${fmtPercent(slow / (fast + slow))} slow`
          : "no segments yet",
        h("span", { class: "muted" }, ` (${fmtCount(fast)} fast segments, ${fmtCount(slow)} slow frames)`),
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

  // ---- ports: the NIC's counters (/v1/engine/ports), else the /metrics port_* samples ----
  const portsTable = table(["Port", "Device", "Address", "State", "RX pkt/s", "TX pkt/s", "RX B/s", "TX B/s", "RX dropped"]);
  const portDetails = h("div", { class: "port-details" });
  let ports = [];
  const portFigures = (p) => {
    const nic = nicHeadline(counters, p.id);
    if (nic) {
      const reported = true;
      return {
        rxPps: rateOrNR(nic.rxPps, reported, (v) => `${fmtCount(v)} pkt/s`),
        txPps: rateOrNR(nic.txPps, reported, (v) => `${fmtCount(v)} pkt/s`),
        rxBps: rateOrNR(nic.rxBps, reported, (v) => `${fmtBytes(v)}/s`),
        txBps: rateOrNR(nic.txBps, reported, (v) => `${fmtBytes(v)}/s`),
        rxDropped: `${fmtCount(nic.rxDropped)} packets`,
      };
    }
    const f = ctx.metrics.port(p.id);
    return {
      rxPps: rateOrNR(f.rxPps, f.rxPackets !== null, (v) => `${fmtCount(v)} pkt/s`),
      txPps: rateOrNR(f.txPps, f.txPackets !== null, (v) => `${fmtCount(v)} pkt/s`),
      rxBps: rateOrNR(f.rxBps, f.rxPackets !== null, (v) => `${fmtBytes(v)}/s`),
      txBps: rateOrNR(f.txBps, f.txPackets !== null, (v) => `${fmtBytes(v)}/s`),
      rxDropped: orNR(f.rxDropped, (v) => `${fmtCount(v)} packets`),
    };
  };
  const renderPorts = () => {
    if (!admin) return needAdmin(portsBody);
    if (ports.length === 0) {
      replace(portsBody, h("p", { class: "muted" }, "No ports configured (POST /v1/ports)."));
      return;
    }
    if (!portsBody.contains(portsTable.el)) replace(portsBody, portsTable.el, portDetails);
    const rows = ports.map((p) => {
      const live = counters.row(p.id);
      return { p, live, f: portFigures(p) };
    });
    const text = (v) => (v instanceof Node ? `<${v.textContent}>` : String(v));
    syncRows(
      portsTable.tbody,
      rows,
      (r) => r.p.id,
      ({ p, live, f }) => {
        const state = live ? live.state : p.status.state;
        const reason = live ? live.reason : p.status.reason;
        const iface = vdevInterface(p.device);
        return h(
          "tr",
          { dataset: { port: String(p.id) } },
          td("Port", h("strong", {}, p.name)),
          td("Device", [
            h("code", {}, p.device),
            iface ? h("div", { class: "reason" }, `af_packet on ${iface}`) : null,
          ]),
          td("Address", `${p.ipv4} / ${p.netmask}${p.gateway ? ` via ${p.gateway}` : ""}`),
          td("State", [stateBadge(state), reason ? h("div", { class: "reason" }, reason) : null]),
          td("RX pkt/s", h("span", { class: "fig-rx-pps" }, f.rxPps), "num"),
          td("TX pkt/s", h("span", { class: "fig-tx-pps" }, f.txPps), "num"),
          td("RX B/s", h("span", { class: "fig-rx-bps" }, f.rxBps), "num"),
          td("TX B/s", h("span", { class: "fig-tx-bps" }, f.txBps), "num"),
          td("RX dropped", h("span", { class: "fig-rx-dropped" }, f.rxDropped), "num"),
        );
      },
      ({ p, live, f }) =>
        JSON.stringify([p, live?.state, live?.reason, Object.values(f).map(text)]),
    );
    replace(
      portDetails,
      ports.map((p) => {
        const engine = engineFigures(counters, p.id, ctx.metrics.latest);
        const nic = nicFigures(counters, p.id);
        if (!engine && !nic) return null;
        return h(
          "div",
          { class: "port-grid" },
          engine
            ? h(
                "section",
                { class: "subcard", dataset: { engine: String(p.id) } },
                h("h3", {}, `Engine counters of port ${p.name}`),
                engine.counters,
              )
            : null,
          nic
            ? h(
                "section",
                { class: "subcard", dataset: { nic: String(p.id) } },
                h("h3", {}, `NIC counters of port ${p.name}`),
                nic,
              )
            : null,
        );
      }),
    );
  };

  // ---- host readiness: what matters depends on the mode (lab af_packet or production) ----
  const check = (status, label, text) => {
    const mark = { ok: "✓", bad: "✗", warn: "!", info: "–" }[status];
    const said = { ok: "ready", bad: "not ready", warn: "worth fixing", info: "not needed in this mode" }[status];
    return h(
      "li",
      { class: `check-${status}`, dataset: { check: label } },
      h("span", { class: "check-mark", "aria-label": said }, mark),
      h("span", {}, h("strong", {}, `${label}: `), text),
    );
  };
  /** lab: every port is an af_packet (or other virtual) device; production: a PCI NIC. */
  const hostMode = () => {
    if (ports.length === 0) return { mode: "unknown", lab: [], pci: [] };
    const lab = ports.filter((p) => !pciAddress(p.device));
    const pci = ports.filter((p) => pciAddress(p.device));
    return { mode: pci.length ? "production" : "lab", lab, pci };
  };
  let hostData = null;
  const renderHost = (host, nics) => {
    hostData = { host, nics };
    const { mode, lab, pci } = hostMode();
    const labMode = mode === "lab";
    const pools = host.hugepages.filter((p) => p.node === null || p.node === undefined);
    const reserved = pools.filter((p) => p.total > 0);
    const bound = nics.filter((n) => n.bound_to_dpdk);
    const bindable = nics.filter((n) => n.bindable && !n.bound_to_dpdk);
    const portNics = pci.map((p) => pciAddress(p.device));
    const unboundPortNics = portNics.filter((a) => !bound.some((n) => n.address === a));
    const hugeText = reserved.length
      ? reserved.map((p) => `${p.total} × ${fmtBytes(p.size_kb * 1024)} (${p.free} free)`).join(", ")
      : labMode
        ? "none reserved: fine for af_packet (the EAL runs with --no-huge)"
        : "none reserved: DPDK would run without hugepages (--no-huge), slower and not for a PCI NIC";
    const isolated = host.cpus.isolated.length;
    const cpuText = isolated
      ? `${fmtCpuList(host.cpus.isolated)} of ${fmtCpuList(host.cpus.online)}`
      : `none of ${fmtCpuList(host.cpus.online)}${host.cmdline.suggestion ? ` — ${host.cmdline.suggestion}` : ""}`;
    let nicCheck;
    if (labMode) {
      nicCheck = check(
        "info",
        "NICs bound to DPDK",
        `not needed: ${lab.map((p) => `${p.name} reads ${vdevInterface(p.device) || p.device} through the kernel`).join("; ")}`,
      );
    } else {
      nicCheck = check(
        bound.length > 0 && unboundPortNics.length === 0 ? "ok" : "bad",
        "NICs bound to DPDK",
        bound.length
          ? `${bound.map((n) => `${n.address} (${n.driver})`).join(", ")}${unboundPortNics.length ? `; not bound: ${unboundPortNics.join(", ")}` : ""}`
          : `none${bindable.length ? `; ${bindable.length} bindable: ${bindable.map((n) => n.address).join(", ")}` : ""}`,
      );
    }
    const iommuOk = host.iommu_groups > 0 || host.vfio_noiommu;
    const modeText = {
      lab: "Lab mode (af_packet): the ports read kernel interfaces. Hugepages, vfio and an IOMMU are not needed; isolated CPUs only steady the latency. What matters: the interface is up and the engine runs.",
      production:
        "Production mode (PCI NIC): the NIC must be bound to vfio-pci (IOMMU groups, or vfio no-IOMMU), hugepages reserved and mounted, and the engine's CPU isolated (isolcpus, nohz_full).",
      unknown:
        "No port configured yet: the checks below are those of a production host (a PCI NIC); a lab port (net_af_packet) needs none of them.",
    }[mode];
    replace(
      hostBody,
      h("p", { class: `mode mode-${mode}`, dataset: { mode } }, modeText),
      h(
        "ul",
        { class: "checks" },
        check(reserved.length > 0 ? "ok" : labMode ? "info" : "bad", "Hugepages", hugeText),
        check(isolated > 0 ? "ok" : labMode ? "info" : "warn", "Isolated CPUs", cpuText),
        nicCheck,
        check(
          iommuOk ? "ok" : labMode ? "info" : "bad",
          "IOMMU",
          host.iommu_groups > 0
            ? `${host.iommu_groups} groups`
            : host.vfio_noiommu
              ? "vfio no-IOMMU mode"
              : labMode
                ? "no IOMMU groups (only vfio-pci needs them)"
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
    renderNics(nics);
  };

  // ---- NICs: PCI devices, and which DPDK port each backs (af_packet ports: their interface) ----
  const portsOf = (n) =>
    ports.filter((p) => {
      if (pciAddress(p.device) === n.address) return true;
      const iface = vdevInterface(p.device);
      return iface !== null && n.interfaces.some((i) => i.name === iface);
    });
  const portLabel = (p) => {
    const live = counters.row(p.id);
    return h(
      "span",
      { class: "port-in-use", dataset: { portInUse: String(p.id) } },
      h("strong", {}, p.name),
      ` (port #${p.id}) `,
      stateBadge(live ? live.state : p.status.state),
    );
  };
  const renderNics = (nics) => {
    const t = table(["PCI", "Device", "Driver", "DPDK", "DPDK port", "In use"]);
    for (const n of nics) {
      const users = portsOf(n);
      t.tbody.append(
        h(
          "tr",
          { dataset: { nic: n.address } },
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
          td("DPDK port", users.length ? users.map(portLabel) : h("span", { class: "muted" }, "none")),
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
    // Ports on an interface that is no PCI device (a veth, a tap): listed too.
    for (const p of ports) {
      if (nics.some((n) => portsOf(n).includes(p))) continue;
      const iface = vdevInterface(p.device);
      t.tbody.append(
        h(
          "tr",
          { dataset: { nic: iface || p.device } },
          td("PCI", h("span", { class: "muted" }, "virtual")),
          td("Device", [iface ? `interface ${iface}` : h("code", {}, p.device)]),
          td("Driver", iface ? "af_packet (kernel)" : "DPDK vdev"),
          td("DPDK", "vdev"),
          td("DPDK port", portLabel(p)),
          td("In use", "by DPDK"),
        ),
      );
    }
    if (t.tbody.children.length === 0) {
      replace(nicsBody, h("p", { class: "muted" }, "No PCI network devices found."));
      return;
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
      const before = JSON.stringify(ports.map((p) => [p.id, p.device, p.status.state]));
      ports = await apiAll("/v1/ports");
      renderPorts();
      const after = JSON.stringify(ports.map((p) => [p.id, p.device, p.status.state]));
      if (hostData && before !== after) renderHost(hostData.host, hostData.nics);
    } catch (err) {
      replace(portsBody, h("p", { class: "error-text" }, `/v1/ports: ${err.message}`));
    }
  };

  refreshHost.addEventListener("click", loadHost);
  const onTick = () => {
    renderLoad();
    renderPorts();
  };
  const loadProfile = async () => {
    try {
      profile = await api("/v1/engine");
      renderEngine();
    } catch {
      // the engine card says what /readyz says; the profile comes with the next load
    }
  };
  const onCounters = () => {
    renderEngine();
    onTick();
  };
  ctx.metrics.addEventListener("tick", onTick);
  counters.addEventListener("tick", onCounters);
  const stopCounters = admin ? counters.start() : () => {};
  if (admin) loadProfile();
  document.addEventListener("wsgw:ready", renderEngine);
  renderEngine();
  renderLoad();
  loadPorts().then(loadHost);
  const timer = setInterval(loadPorts, 5000);
  const hostTimer = setInterval(loadHost, 30000);
  // The API is back (after a restart or an outage): the host cards do not wait 30 s.
  const stopReachable = onApi("reachable", () => {
    if (hostFailed) loadHost();
  });
  return () => {
    stopReachable();
    stopCounters();
    counters.removeEventListener("tick", onCounters);
    ctx.metrics.removeEventListener("tick", onTick);
    document.removeEventListener("wsgw:ready", renderEngine);
    clearInterval(timer);
    clearInterval(hostTimer);
  };
}
