// The login view: asks for an API token, checks it with /ui/whoami, keeps it in
// sessionStorage (this tab only) and sends it as "Authorization: Bearer ...".

import { api, auth } from "../api.js";
import { h } from "../dom.js";
import { clearErrors, field, formError, showErrors } from "../forms.js";

export function mount(root, ctx) {
  const input = h("input", {
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "wsgw_…",
  });
  const submit = h("button", { type: "submit", class: "btn btn-primary" }, "Sign in");
  const form = h(
    "form",
    { class: "form login-form", novalidate: true },
    formError(),
    field("API token", input, "Create one with: wsgw token create --name NAME --scope admin --scope consume"),
    h("div", { class: "actions" }, submit),
  );
  const notice = ctx.message ? h("p", { class: "notice", role: "status" }, ctx.message) : null;

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const token = input.value.trim();
    if (!token) {
      showErrors(form, { detail: [{ loc: ["token"], msg: "Enter an API token." }] });
      return;
    }
    submit.disabled = true;
    auth.save(token);
    try {
      const me = await api("/ui/whoami", { authRedirect: false });
      auth.name = me.name;
      auth.scopes = me.scopes;
      ctx.onSignedIn();
    } catch (err) {
      auth.clear();
      const msg =
        err.status === 401
          ? `The API refused this token: ${err.message}.`
          : err.unreachable
            ? err.message
            : `Sign-in failed (${err.status}): ${err.message}`;
      showErrors(form, { detail: [{ loc: ["token"], msg }] });
    } finally {
      submit.disabled = false;
    }
  });

  root.replaceChildren(
    h(
      "section",
      { class: "card login" },
      h("h1", {}, "Sign in to wsgw"),
      notice,
      h(
        "p",
        { class: "muted" },
        "The token stays in this browser tab (sessionStorage) and is sent to this server only.",
      ),
      form,
    ),
  );
  input.focus();
  return null;
}
