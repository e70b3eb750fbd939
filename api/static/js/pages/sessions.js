// Sessions: the table (wanted and runtime state, rates, RTT, reconnects, gaps) with
// start/stop, and the form that creates a session from an exchange preset.
// Sources: /v1/sessions, /v1/sessions/dialects, /v1/ports, and /metrics for the figures.

import { api, apiAll } from "../api.js";
import {
  fmtCount,
  fmtRate,
  fmtSeconds,
  h,
  orNR,
  rateOrNR,
  replace,
  stateBadge,
  syncRows,
  table,
  td,
} from "../dom.js";
import { clearErrors, field, formError, numberOrUndefined, showErrors } from "../forms.js";
import { isPresetUrl, preset, PRESETS } from "../presets.js";

const NR_DETACHED = "the runtime reports no per-session metrics (no dataplane attached?)";

export function mount(root, ctx) {
  let sessions = [];
  let ports = [];
  let loaded = false;
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const engineNotice = h("p", { class: "notice", hidden: true });
  const list = table(
    ["Session", "Wanted", "State", "Msgs/s", "RTT", "Reconnects", "Gaps", ""],
    "sessions-table",
  );
  list.el.querySelector("table").id = "sessions-table";
  const empty = h("p", { class: "muted", hidden: true }, "No sessions yet: create one below.");
  const created = h("p", { class: "success", role: "status", hidden: true });
  const formCard = h(
    "details",
    { class: "card form-card", id: "new-session" },
    h("summary", {}, h("h2", {}, "New session")),
  );
  const form = buildForm();
  formCard.append(form);

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Sessions"),
    engineNotice,
    pageError,
    h("section", { class: "card" }, list.el, empty),
    created,
    formCard,
  );

  const showError = (err) => {
    if (!err) {
      pageError.hidden = true;
      return;
    }
    replace(pageError, err.unreachable ? err.message : `${err.status}: ${err.message}`);
    pageError.hidden = false;
  };

  // ---- the table -----------------------------------------------------------------------
  const portName = (id) => ports.find((p) => p.id === id)?.name ?? `#${id}`;
  const actions = (s) => {
    const verb = s.desired_state === "running" ? "stop" : "start";
    return h(
      "button",
      {
        type: "button",
        class: `btn btn-small ${verb === "start" ? "btn-primary" : ""}`,
        dataset: { action: verb, session: String(s.id) },
        onclick: (event) => act(s, verb, event.currentTarget),
      },
      verb === "start" ? "Start" : "Stop",
    );
  };
  const buildRow = (s) =>
    h(
      "tr",
      { dataset: { session: String(s.id), name: s.name } },
      td("Session", [
        h("a", { href: `#/sessions/${s.id}`, class: "strong" }, s.name),
        h(
          "div",
          { class: "reason" },
          `${s.dialect} · ${s.transport}${s.port_id ? ` on ${portName(s.port_id)}` : ""}`,
        ),
      ]),
      td("Wanted", h("span", { dataset: { desired: s.desired_state } }, s.desired_state)),
      td("State", [
        stateBadge(s.status.state),
        s.status.reason
          ? h("div", { class: s.status.state === "failed" ? "reason error-text" : "reason" }, s.status.reason)
          : null,
      ]),
      td("Msgs/s", "", "num fig-rate"),
      td("RTT", "", "num fig-rtt"),
      td("Reconnects", "", "num fig-reconnects"),
      td("Gaps", "", "num fig-gaps"),
      td("", actions(s), "row-actions"),
    );
  const signature = (s) =>
    JSON.stringify([s.name, s.desired_state, s.status, s.dialect, s.transport, s.port_id, ports.length]);

  // Figures change every second: update those cells in place, keep the rest of the row.
  const renderFigures = () => {
    for (const tr of list.tbody.children) {
      const f = ctx.metrics.session(tr.dataset.session);
      const cells = {
        rate: rateOrNR(f.rate, f.reported, fmtRate, NR_DETACHED),
        rtt: orNR(f.rtt, fmtSeconds, NR_DETACHED),
        reconnects: orNR(f.reconnects, fmtCount, NR_DETACHED),
        gaps: orNR(f.gaps, fmtCount, NR_DETACHED),
      };
      for (const [k, v] of Object.entries(cells)) {
        const cell = tr.querySelector(`.fig-${k} > .cell`);
        const text = typeof v === "string" ? v : v.textContent;
        if (cell.textContent !== text) replace(cell, v);
      }
    }
  };

  const render = () => {
    empty.hidden = sessions.length > 0 || !loaded;
    list.el.hidden = sessions.length === 0;
    syncRows(list.tbody, sessions, (s) => s.id, buildRow, signature);
    renderFigures();
    const e = ctx.engine;
    if (e && e.state !== "running") {
      replace(
        engineNotice,
        h("strong", {}, `Dataplane ${e.state}: `),
        `${e.reason || "no reason given"}. `,
        e.state === "detached"
          ? "Sessions are recorded and their wanted state kept; none connects until a dataplane is attached."
          : "",
      );
      engineNotice.className = e.state === "failed" ? "notice page-error" : "notice";
      engineNotice.hidden = false;
    } else engineNotice.hidden = true;
  };

  const load = async () => {
    try {
      sessions = await apiAll("/v1/sessions");
      loaded = true;
      showError(null);
      render();
      if (sessions.length === 0 && !formCard.dataset.touched) formCard.open = true;
    } catch (err) {
      if (err.status !== 401 && err.status !== 403) showError(err);
    }
  };

  async function act(s, verb, button) {
    button.disabled = true;
    try {
      await api(`/v1/sessions/${s.id}/${verb}`, { method: "POST" });
      showError(null);
    } catch (err) {
      showError(err);
    }
    await load();
  }

  // ---- the form ------------------------------------------------------------------------
  function buildForm() {
    const el = (tag, attrs, ...kids) => h(tag, attrs, ...kids);
    const name = el("input", {
      name: "name",
      type: "text",
      autocomplete: "off",
      placeholder: "binance-spot",
    });
    const dialect = el(
      "select",
      { name: "dialect" },
      Object.keys(PRESETS).map((d) => el("option", { value: d }, preset(d).label)),
    );
    const url = el("input", {
      name: "url",
      type: "text",
      inputmode: "url",
      autocomplete: "off",
      spellcheck: "false",
    });
    const transport = el(
      "select",
      { name: "transport" },
      el("option", { value: "kernel" }, "kernel (OS sockets)"),
      el("option", { value: "dpdk" }, "dpdk (this gateway's stack)"),
    );
    const port = el("select", { name: "port_id" });
    const portHint = el("span", {});
    const tlsVerify = el("input", { name: "tls_verify", type: "checkbox", checked: true });
    const startNow = el("input", { name: "start_now", type: "checkbox" });
    const number = (n, placeholder, step = "any") =>
      el("input", { name: n, type: "number", inputmode: "decimal", step, min: "0", placeholder });
    const advanced = el(
      "details",
      { class: "advanced" },
      el("summary", {}, "Advanced: TLS, heartbeat, reconnect"),
      el(
        "div",
        { class: "form-grid" },
        field(
          "TLS server name (SNI)",
          el("input", {
            name: "tls_server_name",
            type: "text",
            autocomplete: "off",
            placeholder: "the URL's host",
          }),
        ),
        field(
          "CA bundle on the gateway host",
          el("input", { name: "tls_ca_file", type: "text", autocomplete: "off", placeholder: "system CAs" }),
        ),
        field("Heartbeat interval (s)", number("heartbeat_interval_s", "15")),
        field("Heartbeat timeout (s)", number("heartbeat_timeout_s", "30")),
        field("Reconnect first delay (s)", number("reconnect_initial_delay_s", "0.5")),
        field("Reconnect max delay (s)", number("reconnect_max_delay_s", "30")),
        field("Reconnect attempts", number("reconnect_max_attempts", "forever", "1"), "empty: retry forever"),
      ),
    );
    const submit = el("button", { type: "submit", class: "btn btn-primary" }, "Create session");
    const portField = field("DPDK port", port, portHint);
    const f = el(
      "form",
      { class: "form", novalidate: true, id: "session-form" },
      formError(),
      el(
        "div",
        { class: "form-grid" },
        field("Exchange dialect", dialect),
        field("Name", name, "letters, digits, '.', '_' or '-'"),
        field("WebSocket URL", url),
        field("Transport", transport),
        portField,
        el(
          "div",
          { class: "field checkbox" },
          el("label", {}, tlsVerify, " Verify the server's TLS certificate"),
        ),
      ),
      advanced,
      el("div", { class: "actions" }, el("label", { class: "checkbox" }, startNow, " Start it now"), submit),
    );

    // A dialect's preset fills the URL, unless the operator typed one of their own.
    let nameTouched = false;
    name.addEventListener("input", () => {
      nameTouched = name.value.trim() !== "";
    });
    const applyPreset = () => {
      const p = preset(dialect.value);
      if (isPresetUrl(url.value.trim())) url.value = p.url;
      url.placeholder = p.placeholder || p.url;
      if (!nameTouched) name.value = uniqueName(dialect.value);
    };
    dialect.addEventListener("change", applyPreset);
    const syncTransport = () => {
      portField.hidden = transport.value !== "dpdk";
    };
    transport.addEventListener("change", syncTransport);
    f.addEventListener("input", () => {
      formCard.dataset.touched = "1";
    });

    f.fillPorts = () => {
      const current = port.value;
      replace(
        port,
        el("option", { value: "" }, ports.length ? "— choose a port —" : "— no ports configured —"),
        ports.map((p) => el("option", { value: String(p.id) }, `${p.name} (${p.device}, ${p.ipv4})`)),
      );
      port.value = current;
      replace(
        portHint,
        ports.length
          ? "the port the session's TCP connection leaves from"
          : "create one first: POST /v1/ports",
      );
    };
    f.fillDialects = (names) => {
      const current = dialect.value;
      replace(
        dialect,
        names.map((d) => el("option", { value: d }, preset(d).label)),
      );
      dialect.value = names.includes(current) ? current : names[0];
      applyPreset();
    };
    f.applyPreset = applyPreset;
    f.resetAfterCreate = () => {
      nameTouched = false;
      applyPreset();
    };

    f.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(f);
      created.hidden = true;
      const body = {
        name: name.value.trim(),
        dialect: dialect.value,
        url: url.value.trim(),
        transport: transport.value,
        tls_verify: tlsVerify.checked,
      };
      if (transport.value === "dpdk" && port.value) body.port_id = Number(port.value);
      for (const key of ["tls_server_name", "tls_ca_file"]) {
        const v = f.elements[key].value.trim();
        if (v) body[key] = v;
      }
      for (const key of [
        "heartbeat_interval_s",
        "heartbeat_timeout_s",
        "reconnect_initial_delay_s",
        "reconnect_max_delay_s",
        "reconnect_max_attempts",
      ]) {
        const v = numberOrUndefined(f.elements[key]);
        if (v !== undefined) body[key] = v;
      }
      submit.disabled = true;
      try {
        const session = await api("/v1/sessions", { method: "POST", body });
        let started = "";
        if (startNow.checked) {
          await api(`/v1/sessions/${session.id}/start`, { method: "POST" });
          started = " and asked to start";
        }
        replace(
          created,
          `Session '${session.name}' created${started}. `,
          h("a", { href: `#/sessions/${session.id}` }, "Open it"),
          ".",
        );
        created.hidden = false;
        await load();
        f.resetAfterCreate();
      } catch (err) {
        showErrors(f, err);
      } finally {
        submit.disabled = false;
      }
    });
    syncTransport();
    return f;
  }

  function uniqueName(dialect) {
    const taken = new Set(sessions.map((s) => s.name));
    if (!taken.has(dialect)) return dialect;
    for (let i = 2; ; i += 1) if (!taken.has(`${dialect}-${i}`)) return `${dialect}-${i}`;
  }

  // ---- start ---------------------------------------------------------------------------
  const onTick = () => renderFigures();
  ctx.metrics.addEventListener("tick", onTick);
  document.addEventListener("wsgw:ready", render);
  (async () => {
    const [dialects, portList] = await Promise.all([
      api("/v1/sessions/dialects")
        .then((r) => r.data)
        .catch(() => Object.keys(PRESETS)),
      apiAll("/v1/ports").catch(() => []),
    ]);
    ports = portList;
    form.fillPorts();
    await load();
    form.fillDialects(dialects);
    if (ports.length && !formCard.dataset.touched) {
      form.elements.transport.value = "dpdk";
      form.elements.transport.dispatchEvent(new Event("change"));
    }
  })();
  const timer = setInterval(load, 2000);
  return () => {
    clearInterval(timer);
    ctx.metrics.removeEventListener("tick", onTick);
    document.removeEventListener("wsgw:ready", render);
  };
}
