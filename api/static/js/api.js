// The REST client: bearer token, JSON in and out, errors as ApiError with the API's
// `detail` (a sentence, or FastAPI's list of {loc, msg, type} for 422).

const TOKEN_KEY = "wsgw.token";

/** Who is signed in. The token lives in sessionStorage: gone when the tab closes. */
export const auth = {
  mode: "token", // "token" | "none" (the server says, from /ui/config)
  token: sessionStorage.getItem(TOKEN_KEY),
  name: null,
  scopes: [],
  has(scope) {
    return this.mode === "none" || this.scopes.includes(scope);
  },
  save(token) {
    this.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
  clear() {
    this.save(null);
    this.name = null;
    this.scopes = [];
  },
};

export class ApiError extends Error {
  /**
   * status 0 means the API did not answer at all (network down, server stopped).
   * detail is the API's `detail`: a string, or a list of validation issues.
   */
  constructor(status, detail, path) {
    super(ApiError.describe(status, detail));
    this.status = status;
    this.detail = detail;
    this.path = path;
  }

  static describe(status, detail) {
    if (Array.isArray(detail)) {
      return detail
        .map((d) => `${(d.loc || []).filter((p) => p !== "body").join(".") || "request"}: ${d.msg}`)
        .join("; ");
    }
    if (typeof detail === "string" && detail) return detail;
    if (status === 0) return "the API did not answer";
    return `HTTP ${status}`;
  }

  get unreachable() {
    return this.status === 0;
  }
}

// Listeners: the shell shows a banner while the API is unreachable, and goes back to the
// login view on 401/403 (an expired, revoked or under-scoped token).
const events = new EventTarget();
/** Listen to "unreachable", "reachable" or "auth"; returns the function that stops it. */
export const onApi = (type, fn) => {
  const listener = (e) => fn(e.detail);
  events.addEventListener(type, listener);
  return () => events.removeEventListener(type, listener);
};

/**
 * Call the API. Options: method, body (JSON), headers, text (read the body as text),
 * authRedirect (default true: a 401/403 sends the user back to the login view).
 */
export async function api(path, { method = "GET", body, text = false, authRedirect = true, signal } = {}) {
  const headers = { Accept: text ? "text/plain" : "application/json" };
  const sent = auth.mode === "token" ? auth.token : null;
  if (sent) headers.Authorization = `Bearer ${sent}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      signal,
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    const error = new ApiError(0, `the API at ${location.origin} is unreachable (${err.message})`, path);
    events.dispatchEvent(new CustomEvent("unreachable", { detail: error }));
    throw error;
  }
  events.dispatchEvent(new CustomEvent("reachable", { detail: path }));
  if (response.status === 204) return null;
  const raw = await response.text();
  if (!response.ok) {
    let detail = raw;
    try {
      detail = JSON.parse(raw).detail ?? raw;
    } catch {
      // not JSON (a proxy's error page): keep the text
    }
    const error = new ApiError(response.status, detail, path);
    // Only for the token in use: answers to requests sent before a sign-out (several are
    // in flight when a token is revoked) must not replace the first one's message.
    const current = auth.mode === "none" || (sent !== null && sent === auth.token);
    if (authRedirect && current && (response.status === 401 || response.status === 403)) {
      events.dispatchEvent(new CustomEvent("auth", { detail: error }));
    }
    throw error;
  }
  if (text) return raw;
  return raw ? JSON.parse(raw) : null;
}

/** Every page of a list endpoint ({data, count, offset, limit}), up to `max` rows. */
export async function apiAll(path, { max = 2000 } = {}) {
  const rows = [];
  const sep = path.includes("?") ? "&" : "?";
  for (let offset = 0; offset < max;) {
    const page = await api(`${path}${sep}offset=${offset}&limit=500`);
    rows.push(...page.data);
    offset += page.data.length;
    if (page.data.length === 0 || offset >= page.count) break;
  }
  return rows;
}

/**
 * The WebSocket URL of a subscription's stream (gateway/hub/protocol.py); the token goes
 * in the query because browsers cannot set headers on a WebSocket. envelope: each message
 * as {"type":"msg","seq",...,"topic","payload"} instead of the raw payload.
 */
export function streamUrl(subscriptionId, { envelope = false } = {}) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const params = new URLSearchParams({ subscription: String(subscriptionId) });
  if (envelope) params.set("envelope", "1");
  if (auth.mode === "token" && auth.token) params.set("token", auth.token);
  return `${scheme}//${location.host}/v1/stream?${params}`;
}
