// Live tail: opens /v1/stream?subscription=ID as a WebSocket (the token goes in the query:
// browsers cannot set headers on a WebSocket) and shows each message as it arrives. When
// the server closes or refuses the stream, its close code and reason are shown as sent.
// A close that a restart or an outage explains (RETRY_CODES) opens the stream again by
// itself, backing off, until it opens or the operator disconnects.

import { apiAll, streamUrl } from "../api.js";
import { fmtBytes, fmtRate, h, replace } from "../dom.js";

const KEEP = 500; // messages kept on screen
const SHOW_CHARS = 2000; // of each message

/** What the close codes the gateway and browsers use mean. */
export const CLOSE_CODES = {
  1000: "normal closure",
  1001: "going away (server shutting down)",
  1002: "protocol error",
  1003: "unsupported data",
  1006: "abnormal closure: the connection dropped without a close frame",
  1007: "invalid payload",
  1008: "policy violation",
  1009: "message too big",
  1011: "internal server error",
  1012: "service restart",
  1013: "try again later",
  4008: "consumer too slow: its queue was full",
  4400: "bad request: a query parameter is missing or invalid",
  4401: "unauthorized: missing, invalid or revoked token",
  4403: "forbidden: the token lacks the 'consume' scope",
  4404: "not found: no such subscription",
};

/** Closes after which the same stream opens again by itself: the server went away or
 * restarted (1001, 1012), the connection dropped (1006), the server failed (1011) or asked
 * to try later (1013). Refusals (4xxx) and a normal close wait for the operator. */
export const RETRY_CODES = new Set([1001, 1006, 1011, 1012, 1013]);
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 10000;

/** The wait before retry number `attempt` (0-based): doubling from 0.5 s, at most 10 s. */
export function retryDelayMs(attempt) {
  return Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** attempt);
}

export function mount(root, ctx) {
  let ws = null;
  let count = 0;
  let bytes = 0;
  let paused = false;
  let rateWindow = []; // arrival times (ms) of the last second's messages
  let retryTimer = null; // the pending reopen after a transient close
  let retries = 0; // reopen attempts since the stream last opened
  const decoder = new TextDecoder("utf-8", { fatal: false });

  const select = h("select", { name: "subscription", id: "tail-subscription" });
  const connect = h("button", { type: "submit", class: "btn btn-primary", id: "tail-connect" }, "Connect");
  const disconnect = h(
    "button",
    { type: "button", class: "btn", id: "tail-disconnect", disabled: true },
    "Disconnect",
  );
  const pause = h("button", { type: "button", class: "btn btn-quiet", "aria-pressed": "false" }, "Pause");
  const clear = h("button", { type: "button", class: "btn btn-quiet" }, "Clear");
  const envelope = h("input", { type: "checkbox", name: "envelope", id: "tail-envelope" });
  const envelopeLabel = h(
    "label",
    { class: "checkbox", title: "each message wrapped with its seq, topic and receive time" },
    envelope,
    " Envelope",
  );
  const status = h(
    "div",
    {
      class: "tail-status",
      id: "tail-status",
      role: "status",
      "aria-live": "polite",
      dataset: { state: "idle" },
    },
    "Not connected.",
  );
  const counters = h("p", { class: "muted tail-counters" });
  const log = h("ol", { class: "tail-log", id: "tail-log", "aria-live": "off" });
  const form = h(
    "form",
    { class: "toolbar tail-form", novalidate: true },
    h("label", { for: "tail-subscription" }, "Subscription"),
    select,
    envelopeLabel,
    connect,
    disconnect,
    pause,
    clear,
  );

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Live tail"),
    h("section", { class: "card" }, form, status, counters, log),
  );

  const setStatus = (state, ...content) => {
    status.dataset.state = state;
    status.className = `tail-status tail-${state}`;
    replace(status, ...content);
  };
  const showCounters = () => {
    const now = performance.now();
    rateWindow = rateWindow.filter((t) => now - t < 1000);
    counters.textContent = `${count} messages · ${fmtBytes(bytes)} · ${fmtRate(rateWindow.length)}${paused ? " · paused (still counting)" : ""}`;
  };

  const loadSubscriptions = async () => {
    try {
      const subs = await apiAll("/v1/subscriptions");
      const wanted = ctx.params.get("subscription") || select.value;
      replace(
        select,
        subs.length ? null : h("option", { value: "" }, "— no subscriptions —"),
        subs.map((s) =>
          h(
            "option",
            { value: String(s.id) },
            `#${s.id} ${s.consumer}: ${s.topics.slice(0, 3).join(", ")}${s.topics.length > 3 ? "…" : ""}`,
          ),
        ),
      );
      // A subscription named in the URL is offered even if it is not in the list: the
      // server then says whether it exists (4404), which is what an operator wants to see.
      if (wanted && !subs.some((s) => String(s.id) === wanted)) {
        select.append(h("option", { value: wanted }, `#${wanted}`));
      }
      if (wanted) select.value = wanted;
      connect.disabled = !select.value;
    } catch (err) {
      if (err.status !== 401 && err.status !== 403)
        setStatus("error", `Could not list subscriptions: ${err.message}`);
    }
  };

  const addMessage = (data) => {
    let text;
    let size;
    if (typeof data === "string") {
      text = data;
      size = new TextEncoder().encode(data).length;
    } else {
      size = data.byteLength;
      text = `[binary] ${decoder.decode(data.slice(0, SHOW_CHARS))}`;
    }
    count += 1;
    bytes += size;
    rateWindow.push(performance.now());
    if (paused) return;
    const item = h(
      "li",
      {},
      h("time", {}, new Date().toLocaleTimeString("en-GB", { hour12: false })),
      h("span", { class: "size" }, fmtBytes(size)),
      h("code", {}, text.length > SHOW_CHARS ? `${text.slice(0, SHOW_CHARS)}…` : text),
    );
    log.prepend(item); // newest on top
    while (log.childElementCount > KEEP) log.lastElementChild.remove();
  };

  const open = (retry = false) => {
    close();
    const id = select.value;
    if (!id) return;
    if (!retry) {
      count = 0;
      bytes = 0;
      retries = 0;
    }
    const url = streamUrl(id, { envelope: envelope.checked });
    setStatus("connecting", `Connecting to subscription #${id}…`);
    connect.disabled = true;
    disconnect.disabled = false;
    const socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    ws = socket;
    let opened = false;
    let streaming = false; // a message came on this socket
    socket.addEventListener("open", () => {
      opened = true;
      setStatus("open", `Connected to subscription #${id}: waiting for messages…`);
    });
    socket.addEventListener("message", (event) => {
      if (ws !== socket) return;
      retries = 0; // it works again: the next drop starts the back-off afresh
      if (!streaming) setStatus("open", `Streaming subscription #${id}.`);
      streaming = true;
      addMessage(event.data);
      showCounters();
    });
    // The close event carries the server's code and reason; "error" alone says nothing.
    socket.addEventListener("close", (event) => {
      if (ws !== socket && ws !== null) return;
      if (socket.closedByUs) return; // the operator's Disconnect (or a page change) said it
      ws = null;
      connect.disabled = !select.value;
      disconnect.disabled = true;
      const meaning = CLOSE_CODES[event.code] || "";
      const refused = event.code !== 1000 || !opened;
      const retrying = RETRY_CODES.has(event.code);
      const delay = retryDelayMs(retries);
      setStatus(
        retrying ? "reconnecting" : refused ? "closed-error" : "closed",
        h("strong", {}, opened && count ? "Stream closed" : "The server closed the stream"),
        " — code ",
        h("code", { class: "close-code" }, String(event.code)),
        meaning ? ` (${meaning})` : "",
        event.reason
          ? [": ", h("q", { class: "close-reason" }, event.reason)]
          : event.code === 1006
            ? ": no reason (the connection failed or the server is down)"
            : ": no reason given",
        ".",
        retrying
          ? h(
              "span",
              { class: "retry-note" },
              ` Reconnecting in ${(delay / 1000).toFixed(1)} s (attempt ${retries + 1})…`,
            )
          : null,
      );
      showCounters();
      if (retrying) {
        retries += 1;
        disconnect.disabled = false; // stops the retries too
        retryTimer = setTimeout(() => {
          retryTimer = null;
          open(true);
        }, delay);
      }
    });
  };

  const close = () => {
    if (retryTimer !== null) clearTimeout(retryTimer);
    retryTimer = null;
    const socket = ws;
    ws = null;
    if (socket && socket.readyState <= WebSocket.OPEN) {
      socket.closedByUs = true;
      socket.close(1000, "closed by the dashboard");
    }
    connect.disabled = !select.value;
    disconnect.disabled = true;
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    open();
  });
  disconnect.addEventListener("click", () => {
    close();
    setStatus("closed", "Disconnected.");
  });
  pause.addEventListener("click", () => {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(paused));
    showCounters();
  });
  clear.addEventListener("click", () => log.replaceChildren());
  select.addEventListener("change", () => {
    connect.disabled = !select.value;
  });

  const ticker = setInterval(showCounters, 1000);
  loadSubscriptions().then(() => {
    if (ctx.params.get("subscription") && select.value) open();
  });
  showCounters();
  return () => {
    clearInterval(ticker);
    close();
  };
}
