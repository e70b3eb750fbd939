// Feed groups (admin): each group of redundant legs (issue #19) with what its arbiter did:
// messages delivered, gaps (messages every leg missed), copies dropped, what it holds; per
// leg its session's state, whether the arbiter waits for it, the messages it won (brought
// first) and brought late, how far its late copies lag the winner (p50/p99), how often it
// went down. Source: /v1/groups (api/routes/groups.py), every 2 s; session names from
// /v1/sessions.

import { apiAll } from "../api.js";
import { card, fmtCount, fmtPercent, fmtSeconds, h, kv, replace, stateBadge, syncRows, table, td } from "../dom.js";

const POLL_MS = 2000;

const lag = (ns) => (ns === null || ns === undefined ? h("span", { class: "muted", title: "no late copy yet" }, "—") : fmtSeconds(ns / 1e9));

export function mount(root) {
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const empty = h(
    "p",
    { class: "muted", id: "groups-empty", hidden: true },
    "No feed groups. Make one with POST /v1/groups: two or more sessions of one dialect carrying the same stream.",
  );
  const list = h("div", { id: "groups-list" });
  root.replaceChildren(h("h1", { class: "page-title" }, "Feed groups"), pageError, empty, list);

  const cards = new Map(); // group id -> {section, summary, legs}
  let names = new Map(); // session id -> name
  let previous = new Map(); // group id -> {at, delivered}: for the rate

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };

  const cardFor = (group) => {
    let found = cards.get(group.id);
    if (!found) {
      const summary = h("div", { class: "group-summary" });
      const legs = table(["Leg", "Session", "State", "Arbiter", "Won", "Late", "Lag p50", "Lag p99", "Downs", "Newest id"]);
      legs.el.querySelector("table").classList.add("group-legs");
      const title = h("h2", {});
      const section = h("section", { class: "card group-card", id: `group-${group.id}`, dataset: { group: String(group.id) } }, title, summary, legs.el);
      found = { section, title, summary, legs };
      cards.set(group.id, found);
    }
    return found;
  };

  const renderGroup = (group, now) => {
    const { section, title, summary, legs } = cardFor(group);
    const f = group.figures;
    replace(title, group.name, h("span", { class: "muted" }, ` · group ${group.id}`));
    if (!f) {
      replace(summary, h("p", { class: "muted" }, "Not running in this gateway: no figures."));
      syncRows(legs.tbody, [], String, () => h("tr"), String);
      return section;
    }
    const before = previous.get(group.id);
    const rate = before && now > before.at ? ((f.delivered - before.delivered) * 1000) / (now - before.at) : null;
    previous.set(group.id, { at: now, delivered: f.delivered });
    replace(
      summary,
      kv([
        ["Delivered", h("span", { dataset: { figure: "delivered" } }, `${fmtCount(f.delivered)} msg`, rate === null ? "" : ` (${fmtCount(Math.max(0, rate))}/s)`)],
        [
          "Gaps",
          h(
            "span",
            { dataset: { figure: "gaps" }, class: f.gaps ? "error-text" : "", title: "messages every leg missed" },
            f.gaps ? `${fmtCount(f.gaps)} (${fmtCount(f.lost)} msg lost)` : "none",
          ),
        ],
        ["Copies dropped", h("span", { dataset: { figure: "duplicates" } }, `${fmtCount(f.duplicates)} msg`)],
        ["Held for a hole", `${fmtCount(f.held)} msg (${group.hold_ms} ms past a moving leg, at most ${Math.max(group.hold_ms, 1000)} ms)`],
        ["Published as", h("code", {}, `${f.hub_id}:*`)],
      ]),
    );
    const totalWon = f.legs.reduce((sum, leg) => sum + leg.won, 0);
    syncRows(
      legs.tbody,
      f.legs,
      (leg) => leg.session_id,
      (leg) =>
        h(
          "tr",
          { dataset: { session: String(leg.session_id), leg: String(leg.leg) } },
          td("Leg", String(leg.leg), "num"),
          td("Session", h("a", { href: `#/sessions/${leg.session_id}` }, names.get(leg.session_id) || `session ${leg.session_id}`)),
          td("State", stateBadge(leg.state || "stopped")),
          td("Arbiter", leg.live ? "waited for" : h("span", { class: "muted", title: "down: holes do not wait for it" }, "not waited for")),
          td("Won", h("span", { dataset: { figure: "won" } }, `${fmtCount(leg.won)}`, totalWon ? ` (${fmtPercent(leg.won / totalWon)})` : ""), "num"),
          td("Late", h("span", { dataset: { figure: "late" } }, fmtCount(leg.late)), "num"),
          td("Lag p50", h("span", { dataset: { figure: "lag-p50" } }, lag(leg.lag_p50_ns)), "num"),
          td("Lag p99", h("span", { dataset: { figure: "lag-p99" } }, lag(leg.lag_p99_ns)), "num"),
          td("Downs", fmtCount(leg.downs), "num"),
          td("Newest id", leg.newest_id === null ? "—" : String(leg.newest_id), "num"),
        ),
      (leg) => JSON.stringify([leg, names.get(leg.session_id), totalWon]),
    );
    return section;
  };

  const load = async () => {
    try {
      const [groups, sessions] = await Promise.all([apiAll("/v1/groups"), apiAll("/v1/sessions").catch(() => null)]);
      if (sessions) names = new Map(sessions.map((s) => [s.id, s.name]));
      const now = Date.now();
      const shown = groups.map((g) => renderGroup(g, now));
      for (const id of [...cards.keys()]) {
        if (!groups.some((g) => g.id === id)) {
          cards.delete(id);
          previous.delete(id);
        }
      }
      list.replaceChildren(...shown);
      empty.hidden = groups.length > 0;
      showError(null);
    } catch (err) {
      showError(err);
    }
  };

  load();
  const timer = setInterval(load, POLL_MS);
  return () => clearInterval(timer);
}
