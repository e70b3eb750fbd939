// Subscriptions (consumers): who reads which topics of which session, their open streams,
// lag (messages queued), delivery rate, drops and disconnect reasons, a link to tail each
// one, and a form to add one. Sources: /v1/subscriptions, /v1/sessions (in full to an admin;
// to a consume token the sessions it may subscribe to: id, name, dialect, state, topics), and the hub's wsgw_consumer_* metrics, which count per consumer name.

import { api, apiAll, auth } from "../api.js";
import {
  confirmButton,
  fmtCount,
  fmtRate,
  h,
  notReported,
  orNR,
  rateOrNR,
  replace,
  syncRows,
  table,
  td,
} from "../dom.js";
import { clearErrors, field, formError, numberOrUndefined, showErrors } from "../forms.js";
import { preset } from "../presets.js";

const NR = "no fan-out hub reports consumer metrics (wsgw_consumer_*) yet";

/** {reason: n} -> "slow: 2, client: 1" (only the reasons that happened), or "none". */
function reasonsText(counts) {
  const seen = Object.entries(counts).filter(([, n]) => n > 0);
  return seen.length ? seen.map(([r, n]) => `${r}: ${fmtCount(n)}`).join(", ") : "none";
}

export function mount(root, ctx) {
  let subs = [];
  let sessions = null; // null: not listed (yet)
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const list = table(
    ["Consumer", "Session", "Topics", "Queue", "Streams", "Lag", "Delivered/s", "Dropped", "Disconnects", ""],
    "subs-table",
  );
  list.el.querySelector("table").id = "subs-table";
  const empty = h("p", { class: "muted", hidden: true }, "No subscriptions yet.");
  const created = h("p", { class: "success", role: "status", hidden: true });
  const formCard = h(
    "details",
    { class: "card form-card", id: "new-subscription" },
    h("summary", {}, h("h2", {}, "New subscription")),
  );

  // Per topic: the upstream's message rate (session_topic_messages) and its subscribers.
  const topicsTable = table(["Session", "Topic", "Msgs/s", "Received", "Subscriptions", "Streams"]);
  topicsTable.el.querySelector("table").id = "topics-table";
  root.replaceChildren(
    h("h1", { class: "page-title" }, "Subscriptions"),
    pageError,
    h("section", { class: "card" }, list.el, empty),
    h("section", { class: "card", id: "topics-card" }, h("h2", {}, "Topics"), topicsTable.el),
    created,
    formCard,
  );

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };
  const sessionLabel = (id) => {
    const s = sessions?.find((x) => x.id === id);
    if (!s) return `#${id}`;
    return auth.has("admin") ? h("a", { href: `#/sessions/${s.id}` }, s.name) : s.name;
  };

  const buildRow = (sub) =>
    h(
      "tr",
      { dataset: { subscription: String(sub.id), consumer: sub.consumer } },
      td("Consumer", [h("strong", {}, sub.consumer), h("div", { class: "reason" }, `#${sub.id}`)]),
      td("Session", sessionLabel(sub.session_id)),
      td(
        "Topics",
        h(
          "span",
          { class: "chips" },
          sub.topics.slice(0, 6).map((t) => h("code", {}, t)),
          sub.topics.length > 6 ? ` +${sub.topics.length - 6}` : "",
        ),
      ),
      td(
        "Queue",
        `${fmtCount(sub.queue_size)} · ${sub.overflow.replace("_", " ")}${sub.conflation_ms ? ` · conflate ${sub.conflation_ms} ms` : ""}`,
      ),
      td("Streams", "", "num fig-connected"),
      td("Lag", "", "num fig-lag"),
      td("Delivered/s", "", "num fig-delivered"),
      td("Dropped", "", "num fig-dropped"),
      td("Disconnects", "", "fig-disconnects"),
      td(
        "",
        [
          h("a", { class: "btn btn-small", href: `#/tail?subscription=${sub.id}` }, "Tail"),
          confirmButton("Delete", (button) => remove(sub, button), {
            class: "btn btn-small btn-quiet",
            dataset: { action: "delete" },
          }),
        ],
        "row-actions",
      ),
    );

  const renderFigures = () => {
    for (const tr of list.tbody.children) {
      const f = ctx.metrics.consumer(tr.dataset.consumer);
      // Once a hub reports, a consumer without samples (no stream open yet) counts zero.
      const count = (v) => (v === null && f.reported ? "0" : orNR(v, fmtCount, NR));
      const dropped =
        f.dropped === null
          ? f.reported
            ? "0"
            : notReported(NR)
          : fmtCount(Object.values(f.dropped).reduce((a, b) => a + b, 0));
      const cells = {
        connected: count(f.connected),
        lag: count(f.lag),
        delivered:
          f.reported && f.delivered === null
            ? fmtRate(0)
            : rateOrNR(f.deliveredRate, f.delivered !== null, fmtRate, NR),
        dropped,
        disconnects: f.disconnects ? reasonsText(f.disconnects) : f.reported ? "none" : notReported(NR),
      };
      if (f.dropped) tr.querySelector(".fig-dropped").title = reasonsText(f.dropped);
      for (const [k, v] of Object.entries(cells)) {
        const cell = tr.querySelector(`.fig-${k} > .cell`);
        const text = typeof v === "string" ? v : v.textContent;
        if (cell.textContent !== text) replace(cell, v);
      }
    }
  };

  const TOPIC_NR = "the runtime reports no session_topic_messages";
  const renderTopics = () => {
    const rows = new Map(); // "session\ttopic" -> {session, topic, subs: []}
    for (const sub of subs) {
      for (const topic of sub.topics) {
        const key = `${sub.session_id}\t${topic}`;
        if (!rows.has(key)) rows.set(key, { session: sub.session_id, topic, subs: [] });
        rows.get(key).subs.push(sub);
      }
    }
    const items = [...rows.values()].sort((a, b) => a.session - b.session || a.topic.localeCompare(b.topic));
    const figures = (r) => {
      const t = ctx.metrics.topic(r.session, r.topic);
      // Streams: the hub counts open streams per consumer name, summed over its consumers.
      const consumers = [...new Set(r.subs.map((s) => s.consumer))];
      const connected = consumers.map((c) => ctx.metrics.consumer(c));
      const reported = connected.some((c) => c.reported);
      const streams = reported ? connected.reduce((n, c) => n + (c.connected ?? 0), 0) : null;
      return {
        rate: rateOrNR(t.rate, t.total !== null, fmtRate, TOPIC_NR),
        total: t.total === null ? (t.reported ? "0" : notReported(TOPIC_NR)) : `${fmtCount(t.total)} msgs`,
        streams: orNR(streams, fmtCount, NR),
      };
    };
    const text = (v) => (typeof v === "string" ? v : v.textContent);
    syncRows(
      topicsTable.tbody,
      items,
      (r) => `${r.session}\t${r.topic}`,
      (r) => {
        const f = figures(r);
        return h(
          "tr",
          { dataset: { session: String(r.session), topic: r.topic } },
          td("Session", sessionLabel(r.session)),
          td("Topic", h("code", {}, r.topic)),
          td("Msgs/s", h("span", { class: "fig-topic-rate" }, f.rate), "num"),
          td("Received", h("span", { class: "fig-topic-total" }, f.total), "num"),
          td("Subscriptions", h("span", { class: "fig-topic-subs" }, String(r.subs.length)), "num"),
          td("Streams", h("span", { class: "fig-topic-streams" }, f.streams), "num"),
        );
      },
      (r) => {
        const f = figures(r);
        return JSON.stringify([r.subs.map((s) => s.id), sessions?.length, text(f.rate), text(f.total), text(f.streams)]);
      },
    );
  };

  const render = () => {
    empty.hidden = subs.length > 0;
    list.el.hidden = subs.length === 0;
    syncRows(
      list.tbody,
      subs,
      (s) => s.id,
      buildRow,
      (s) => JSON.stringify([s, sessions?.length]),
    );
    renderFigures();
    renderTopics();
  };

  const load = async () => {
    try {
      const [s, ss] = await Promise.all([
        apiAll("/v1/subscriptions"),
        apiAll("/v1/sessions"),
      ]);
      subs = s;
      const hadSessions = sessions;
      sessions = ss;
      showError(null);
      render();
      if (!hadSessions && sessions) form.fillSessions();
    } catch (err) {
      if (err.status !== 401 && err.status !== 403) showError(err);
    }
  };

  async function remove(sub, button) {
    button.disabled = true;
    try {
      await api(`/v1/subscriptions/${sub.id}`, { method: "DELETE" });
      showError(null);
    } catch (err) {
      showError(err);
    }
    await load();
  }

  // ---- the form ------------------------------------------------------------------------
  const form = (() => {
    // The session is picked by name once /v1/sessions answered; typed as an id until then.
    const sessionSelect = h("select", { name: "session_id" });
    const sessionNumber = h("input", {
      name: "session_id",
      type: "number",
      min: "1",
      step: "1",
      inputmode: "numeric",
    });
    const sessionSlot = h("div", {}, field("Session", sessionNumber));
    const consumer = h("input", {
      name: "consumer",
      type: "text",
      autocomplete: "off",
      placeholder: "pricer-1",
    });
    const topics = h("textarea", {
      name: "topics",
      rows: "2",
      spellcheck: "false",
      placeholder: "btcusdt@trade ethusdt@trade",
    });
    const queue = h("input", {
      name: "queue_size",
      type: "number",
      min: "1",
      step: "1",
      placeholder: "4096",
    });
    const overflow = h(
      "select",
      { name: "overflow" },
      h("option", { value: "disconnect" }, "disconnect the consumer (no silent loss)"),
      h("option", { value: "drop_oldest" }, "drop the oldest and report a gap"),
    );
    const conflation = h("input", {
      name: "conflation_ms",
      type: "number",
      min: "0",
      step: "1",
      placeholder: "0 (off)",
    });
    const submit = h("button", { type: "submit", class: "btn btn-primary" }, "Subscribe");
    const f = h(
      "form",
      { class: "form", novalidate: true, id: "subscription-form" },
      formError(),
      h(
        "div",
        { class: "form-grid" },
        sessionSlot,
        field("Consumer", consumer, "who reads: an application or host name"),
        field("Topics", topics, "separated by spaces, commas or new lines"),
        field("Queue size", queue),
        field("When the queue is full", overflow),
        field("Conflation (ms)", conflation),
      ),
      h("div", { class: "actions" }, submit),
    );
    const topicHint = () => {
      const s = sessions?.find((x) => String(x.id) === sessionSelect.value);
      if (s) topics.placeholder = preset(s.dialect).topics.join(" ") || "topic-1 topic-2";
    };
    sessionSelect.addEventListener("change", topicHint);
    f.fillSessions = () => {
      if (!sessions) return;
      replace(
        sessionSelect,
        sessions.length ? null : h("option", { value: "" }, "— no sessions: create one first —"),
        sessions.map((s) => h("option", { value: String(s.id) }, `${s.name} (${s.dialect})`)),
      );
      replace(sessionSlot, field("Session", sessionSelect));
      topicHint();
    };
    f.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(f);
      created.hidden = true;
      const sessionInput = f.elements.session_id;
      const body = {
        session_id: sessionInput.value === "" ? null : Number(sessionInput.value),
        consumer: consumer.value.trim(),
        topics: topics.value.split(/[\s,]+/).filter(Boolean),
        overflow: overflow.value,
      };
      const q = numberOrUndefined(queue);
      if (q !== undefined) body.queue_size = q;
      const c = numberOrUndefined(conflation);
      if (c !== undefined) body.conflation_ms = c;
      submit.disabled = true;
      try {
        const sub = await api("/v1/subscriptions", { method: "POST", body });
        replace(
          created,
          `Subscription #${sub.id} created for '${sub.consumer}'. `,
          sub.upstream_subscribed.length
            ? `Subscribed upstream: ${sub.upstream_subscribed.join(", ")}. `
            : "",
          h("a", { href: `#/tail?subscription=${sub.id}` }, "Tail it"),
          ".",
        );
        created.hidden = false;
        topics.value = "";
        await load();
      } catch (err) {
        showErrors(f, err);
      } finally {
        submit.disabled = false;
      }
    });
    return f;
  })();
  formCard.append(form);

  const onTick = () => {
    renderFigures();
    renderTopics();
  };
  ctx.metrics.addEventListener("tick", onTick);
  load().then(() => {
    if (subs.length === 0) formCard.open = true;
  });
  const timer = setInterval(load, 3000);
  return () => {
    clearInterval(timer);
    ctx.metrics.removeEventListener("tick", onTick);
  };
}
