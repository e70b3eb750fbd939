// The shell: finds out whether auth is on, signs in, routes between pages (hash routes),
// and shows what is wrong with the connection to the API in a banner.

import { api, ApiError, auth, onApi } from "./api.js";
import { h, replace, stateBadge } from "./dom.js";
import { MetricsPoller } from "./metrics.js";
import * as books from "./pages/books.js";
import * as charts from "./pages/charts.js";
import * as consumers from "./pages/consumers.js";
import * as groups from "./pages/groups.js";
import * as login from "./pages/login.js";
import * as nodes from "./pages/nodes.js";
import * as overview from "./pages/overview.js";
import * as sessionDetail from "./pages/session_detail.js";
import * as sessions from "./pages/sessions.js";
import * as subscriptions from "./pages/subscriptions.js";
import * as tail from "./pages/tail.js";
import * as tokens from "./pages/tokens.js";

const view = document.getElementById("view");
const banner = document.getElementById("banner");
const nav = document.getElementById("nav");
const pill = document.getElementById("engine-pill");
const who = document.getElementById("who");
const logoutButton = document.getElementById("logout");

// Pages: the hash route's first part -> module, and the scope it needs.
const PAGES = {
  overview: { module: overview, scope: null, title: "Overview" },
  sessions: { module: sessions, scope: "admin", title: "Sessions" },
  session: { module: sessionDetail, scope: "admin", title: "Session" },
  groups: { module: groups, scope: "admin", title: "Feed groups" },
  subscriptions: { module: subscriptions, scope: "consume", title: "Subscriptions" },
  tail: { module: tail, scope: "consume", title: "Live tail" },
  books: { module: books, scope: "consume", title: "Books" },
  consumers: { module: consumers, scope: "admin", title: "Consumers" },
  nodes: { module: nodes, scope: "admin", title: "Nodes" },
  charts: { module: charts, scope: null, title: "Charts" },
  tokens: { module: tokens, scope: "admin", title: "Tokens" },
};

const ctx = {
  config: null, // /ui/config: {auth, public_metrics, version, stream_path}
  metrics: new MetricsPoller(),
  engine: null, // the last /readyz engine: {state, reason, details}
  navigate: (hash) => {
    location.hash = hash;
  },
};

let cleanup = null;
let readyTimer = null;
let bootError = null;

// ---- banner: API unreachable, and who has recovered --------------------------------------
onApi("unreachable", (error) => {
  banner.hidden = false;
  banner.className = "banner banner-bad";
  replace(banner, h("strong", {}, "API unreachable. "), `${error.message}. Retrying…`);
});
onApi("reachable", () => {
  if (banner.classList.contains("banner-bad")) {
    banner.hidden = true;
    banner.className = "banner";
  }
});

// ---- auth failures: back to the login view, saying why ---------------------------------
onApi("auth", (error) => {
  const why =
    error.status === 401
      ? `Signed out: the API refused the token (${error.message}).`
      : `The API refused this token (${error.message}).`;
  signOut(why);
});

logoutButton.addEventListener("click", () => signOut("Signed out."));

function signOut(message) {
  auth.clear();
  ctx.metrics.stop();
  showChrome(false);
  const back = location.hash && !location.hash.startsWith("#/login") ? location.hash : "";
  sessionStorage.setItem("wsgw.loginMessage", message || "");
  if (back) sessionStorage.setItem("wsgw.returnTo", back);
  if (location.hash === "#/login") route();
  else location.hash = "#/login";
}

function showChrome(on) {
  nav.hidden = !on;
  pill.hidden = !on;
  who.hidden = !on;
  logoutButton.hidden = !on || auth.mode === "none";
  if (on) {
    who.textContent = auth.mode === "none" ? "auth off (local)" : auth.name || "";
    who.title =
      auth.mode === "none" ? "authentication is off on this server" : `scopes: ${auth.scopes.join(", ")}`;
    for (const link of nav.querySelectorAll("a")) {
      const page = PAGES[link.dataset.page];
      link.hidden = Boolean(page.scope && !auth.has(page.scope));
    }
    pollReady(); // what /readyz says depends on the token: ask with this one
  }
}

// ---- the engine pill: /readyz every 5 s ---------------------------------------------------
// Anyone gets {status}; with an admin token (or auth off) also the engine and the database.
async function pollReady() {
  clearTimeout(readyTimer);
  try {
    const headers = auth.mode === "token" && auth.token ? { Authorization: `Bearer ${auth.token}` } : {};
    const response = await fetch("/readyz", { cache: "no-store", headers, credentials: "omit" });
    const body = await response.json();
    ctx.engine = body.engine || null;
    ctx.ready = body;
    if (body.engine) {
      replace(pill, "engine ", stateBadge(body.engine.state));
      pill.title = body.engine.reason
        ? `engine ${body.engine.state}: ${body.engine.reason}`
        : `engine ${body.engine.state}`;
    } else {
      replace(pill, "gateway ", stateBadge(body.status || "unreachable"));
      pill.title = "the engine's state needs the 'admin' scope";
    }
    if (banner.classList.contains("banner-bad")) banner.hidden = true;
  } catch (err) {
    ctx.engine = null;
    replace(pill, "engine ", stateBadge("unreachable"));
    banner.hidden = false;
    banner.className = "banner banner-bad";
    replace(
      banner,
      h("strong", {}, "API unreachable. "),
      `${location.origin} does not answer (${err.message}). Retrying…`,
    );
  }
  document.dispatchEvent(new Event("wsgw:ready"));
  readyTimer = setTimeout(pollReady, 5000);
}

// ---- routing -----------------------------------------------------------------------------
// A page's context: the shared one (read through, so later /readyz answers show) plus its own.
function pageContext(own) {
  return Object.assign(Object.create(ctx), own);
}

function parseHash() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  return { parts, params: new URLSearchParams(query) };
}

async function route() {
  if (cleanup) {
    try {
      cleanup();
    } catch (err) {
      console.warn("page cleanup failed", err);
    }
    cleanup = null;
  }
  const { parts, params } = parseHash();
  if (bootError) return showBootError();
  if (parts[0] === "login" || (!auth.token && auth.mode === "token")) {
    if (parts[0] !== "login") {
      if (location.hash) sessionStorage.setItem("wsgw.returnTo", location.hash);
      location.hash = "#/login";
      return;
    }
    showChrome(false);
    // Kept until the next sign-in: the login view may be shown again before then.
    const message = sessionStorage.getItem("wsgw.loginMessage") || "";
    cleanup = login.mount(view, pageContext({ message, onSignedIn: signedIn }));
    document.title = "Sign in · wsgw";
    return;
  }
  let name = parts[0] || "overview";
  if (name === "sessions" && parts[1]) name = "session";
  const page = PAGES[name];
  if (!page) {
    replace(
      view,
      h(
        "section",
        { class: "card" },
        h("h2", {}, "Not found"),
        h(
          "p",
          {},
          `No page “${parts.join("/")}”. `,
          h("a", { href: "#/overview" }, "Go to the overview"),
          ".",
        ),
      ),
    );
    return;
  }
  for (const link of nav.querySelectorAll("a")) {
    link.classList.toggle("active", link.dataset.page === (name === "session" ? "sessions" : name));
    if (link.classList.contains("active")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${page.title} · wsgw`;
  view.replaceChildren();
  if (page.scope && !auth.has(page.scope)) {
    replace(
      view,
      h(
        "section",
        { class: "card" },
        h("h2", {}, page.title),
        h(
          "p",
          { class: "error-text" },
          `This page needs the '${page.scope}' scope; the token '${auth.name}' has ${auth.scopes.join(", ") || "none"}.`,
        ),
      ),
    );
    return;
  }
  cleanup = page.module.mount(view, pageContext({ params, id: parts[1] })) || null;
}

async function signedIn() {
  sessionStorage.removeItem("wsgw.loginMessage");
  showChrome(true);
  ctx.metrics.start();
  const back = sessionStorage.getItem("wsgw.returnTo");
  sessionStorage.removeItem("wsgw.returnTo");
  const target = back && back !== "#/login" ? back : "#/overview";
  if (location.hash === target) route();
  else location.hash = target;
}

function showBootError() {
  showChrome(false);
  replace(
    view,
    h(
      "section",
      { class: "card" },
      h("h2", {}, "The API does not answer"),
      h("p", { class: "error-text" }, bootError.message),
      h("p", { class: "muted" }, "The dashboard retries every 3 seconds."),
    ),
  );
}

// ---- start -------------------------------------------------------------------------------
async function boot() {
  try {
    ctx.config = await api("/ui/config", { authRedirect: false });
    bootError = null;
  } catch (err) {
    bootError = err instanceof ApiError ? err : new ApiError(0, String(err));
    showBootError();
    setTimeout(boot, 3000);
    return;
  }
  auth.mode = ctx.config.auth;
  pollReady();
  if (auth.mode === "none") {
    const me = await api("/ui/whoami", { authRedirect: false }).catch((err) => err);
    if (me instanceof ApiError) {
      bootError = me;
      return showBootError();
    }
    auth.name = me.name;
    auth.scopes = me.scopes;
    showChrome(true);
    ctx.metrics.start();
    if (!location.hash || location.hash === "#/login") location.hash = "#/overview";
  } else if (auth.token) {
    try {
      const me = await api("/ui/whoami", { authRedirect: false });
      auth.name = me.name;
      auth.scopes = me.scopes;
      showChrome(true);
      ctx.metrics.start();
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        auth.clear();
        sessionStorage.setItem("wsgw.loginMessage", `The saved token was refused: ${err.message}.`);
      } else {
        bootError = err;
        showBootError();
        setTimeout(boot, 3000);
        return;
      }
    }
  }
  window.addEventListener("hashchange", route);
  route();
}

boot();
