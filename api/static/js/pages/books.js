// Book view: one local order book of the gateway (GET /v1/books/{session}/{symbol}), polled:
// the depth ladder (asks above, bids below, best in the middle), the spread, the update rate
// (the book's changes between two polls, by its receive stamp) and its resyncs by reason.
// The session and symbol come from the route (#/books?session=3&symbol=BTC/USD) or the
// pickers; the symbols are those the session keeps books of (GET /v1/books/{session}).

import { api, apiAll } from "../api.js";
import { card, fmtRate, h, kv, replace, stateBadge } from "../dom.js";

const POLL_MS = 1000;
const DEPTH = 15; // levels a side on the ladder

/** The spread of a book and its mid, as exact-ish text (prices are decimal strings). */
export function spreadOf(bids, asks) {
  if (!bids.length || !asks.length) return null;
  const bid = Number(bids[0][0]);
  const ask = Number(asks[0][0]);
  const places = Math.max(decimals(bids[0][0]), decimals(asks[0][0]));
  const spread = ask - bid;
  const mid = (ask + bid) / 2;
  return {
    spread: spread.toFixed(places),
    bps: mid > 0 ? ((spread / mid) * 10000).toFixed(2) : "—",
  };
}

function decimals(text) {
  const dot = text.indexOf(".");
  return dot < 0 ? 0 : text.length - dot - 1;
}

export function mount(root, ctx) {
  const sessionSelect = h("select", { name: "session", id: "books-session" });
  const symbolSelect = h("select", { name: "symbol", id: "books-symbol" });
  const status = h("p", { class: "muted", id: "books-status", role: "status" }, "Loading…");
  const summary = h("div", { id: "books-summary" });
  const ladder = h("table", { class: "book-ladder", id: "books-ladder" });
  const resyncs = h("div", { id: "books-resyncs" });
  root.replaceChildren(
    h("h1", { class: "page-title" }, "Books"),
    h(
      "section",
      { class: "card" },
      h(
        "form",
        { class: "toolbar", novalidate: true, onsubmit: (e) => e.preventDefault() },
        h("label", { for: "books-session" }, "Session"),
        sessionSelect,
        h("label", { for: "books-symbol" }, "Symbol"),
        symbolSelect,
      ),
      status,
    ),
    card("Book", summary, h("div", { class: "table-wrap" }, ladder)),
    card("Resyncs", resyncs),
  );

  let last = null; // {key, updated_ns, at}: the previous poll, for the update rate
  let rate = null;
  let symbolsOf = null;

  const loadSessions = async () => {
    const sessions = await apiAll("/v1/sessions");
    const wanted = ctx.params.get("session") || sessionSelect.value;
    replace(
      sessionSelect,
      sessions.length ? null : h("option", { value: "" }, "— no sessions —"),
      sessions.map((s) =>
        h("option", { value: String(s.id), selected: String(s.id) === wanted }, `${s.id} · ${s.name}`),
      ),
    );
  };

  const loadSymbols = async () => {
    const sid = sessionSelect.value;
    if (!sid) return;
    const body = await api(`/v1/books/${sid}`);
    const key = `${sid}:${body.symbols.join(",")}`;
    if (key === symbolsOf) return;
    symbolsOf = key;
    const wanted = ctx.params.get("symbol") || symbolSelect.value;
    replace(
      symbolSelect,
      body.symbols.length ? null : h("option", { value: "" }, "— no books —"),
      body.symbols.map((s) => h("option", { value: s, selected: s === wanted }, s)),
    );
    if (!body.symbols.length) {
      status.textContent = body.available
        ? "This session keeps no book yet: subscribe a book topic with the normalized format."
        : "This gateway runs no dataplane, so it keeps no books.";
    }
  };

  const renderBook = (book) => {
    const key = `${book.session_id}:${book.symbol}`;
    const now = performance.now();
    if (last && last.key === key && book.updated_ns !== last.updated_ns) {
      rate = 1000 / Math.max(now - last.at, 1); // at least one change since the last poll
      last = { key, updated_ns: book.updated_ns, at: now };
    } else if (!last || last.key !== key) {
      rate = null;
      last = { key, updated_ns: book.updated_ns, at: now };
    } else if (now - last.at > 5 * POLL_MS) {
      rate = 0;
    }
    const spread = spreadOf(book.bids, book.asks);
    replace(
      summary,
      kv([
        ["State", stateBadge(book.stale ? "resyncing" : "ok")],
        ["Venue", book.venue],
        ["Topic", book.topic],
        ["Sequence", book.seq ? String(book.seq) : "— (the venue has none)"],
        ["Best bid", book.bids.length ? `${book.bids[0][0]} × ${book.bids[0][1]}` : "—"],
        ["Best ask", book.asks.length ? `${book.asks[0][0]} × ${book.asks[0][1]}` : "—"],
        [
          "Spread",
          h("span", { id: "books-spread" }, spread ? `${spread.spread} (${spread.bps} bps)` : "—"),
        ],
        ["Update rate", h("span", { id: "books-rate" }, rate === null ? "measuring…" : fmtRate(rate))],
      ]),
    );
    const asks = book.asks.slice(0, DEPTH).reverse();
    const bids = book.bids.slice(0, DEPTH);
    const row = (side, [price, size]) =>
      h(
        "tr",
        { class: `book-${side}`, dataset: { side } },
        h("td", { class: "num" }, side === "bid" ? size : ""),
        h("td", { class: "num book-price" }, price),
        h("td", { class: "num" }, side === "ask" ? size : ""),
      );
    replace(
      ladder,
      h("thead", {}, h("tr", {}, h("th", {}, "Bid size"), h("th", {}, "Price"), h("th", {}, "Ask size"))),
      h("tbody", {}, asks.map((lv) => row("ask", lv)), bids.map((lv) => row("bid", lv))),
    );
    const reasons = Object.entries(book.resyncs);
    replace(
      resyncs,
      reasons.length
        ? kv([
            ...reasons.map(([why, n]) => [why, h("span", { dataset: { reason: why } }, String(n))]),
            ["Last reset", book.last_reset_reason || "—"],
          ])
        : h("p", { class: "muted" }, "None: the book has not been found wrong."),
    );
  };

  const load = async () => {
    try {
      if (!sessionSelect.options.length) await loadSessions();
      await loadSymbols();
      const sid = sessionSelect.value;
      const symbol = symbolSelect.value;
      if (!sid || !symbol) return;
      const book = await api(`/v1/books/${sid}/${encodeURIComponent(symbol)}?depth=${DEPTH}`);
      status.textContent = `Session ${sid}, ${symbol}: refreshed every ${POLL_MS / 1000} s.`;
      renderBook(book);
    } catch (err) {
      status.textContent = `Could not read the book: ${err.message}`;
    }
  };

  sessionSelect.addEventListener("change", () => {
    symbolsOf = null;
    load();
  });
  symbolSelect.addEventListener("change", load);
  load();
  const timer = setInterval(load, POLL_MS);
  return () => clearInterval(timer);
}
