// API tokens (admin): the list, a form that creates one and shows its secret once (with a
// copy button), and revoke. Source: /v1/tokens, with the same scope rule as the API: the
// page is offered to an admin token only (main.js), and the API refuses anyone else.

import { api, apiAll, auth } from "../api.js";
import { confirmButton, fmtAgo, fmtTime, h, replace, stateBadge, syncRows, table, td } from "../dom.js";
import { clearErrors, field, formError, showErrors } from "../forms.js";

export function mount(root) {
  let tokens = [];
  const pageError = h("p", { class: "page-error", role: "alert", hidden: true });
  const list = table(["Name", "Scopes", "Prefix", "Created", "Last used", "State", ""]);
  list.el.querySelector("table").id = "tokens-table";
  const secretBox = h("section", { class: "card secret-card", id: "token-secret", hidden: true });

  const nameInput = h("input", {
    name: "name",
    required: true,
    maxLength: 100,
    autocomplete: "off",
    placeholder: "pricer-reader",
  });
  const scopeBox = (scope, checked) =>
    h(
      "label",
      { class: "checkbox" },
      h("input", { type: "checkbox", name: "scopes", value: scope, checked }),
      ` ${scope}`,
    );
  const form = h(
    "form",
    { id: "token-form", class: "form", novalidate: true },
    formError(),
    field("Name", nameInput, "Who or what uses it: one token per consumer makes revoking easy."),
    h(
      "fieldset",
      { class: "field", dataset: { field: "scopes" } },
      h("legend", {}, "Scopes"),
      scopeBox("consume", true),
      scopeBox("admin", false),
      h(
        "p",
        { class: "hint" },
        "consume: subscribe and read streams. admin: everything, tokens included.",
      ),
      h("p", { class: "field-error", dataset: { errorFor: "scopes" }, hidden: true }),
    ),
    h("button", { type: "submit", class: "btn" }, "Create token"),
  );

  root.replaceChildren(
    h("h1", { class: "page-title" }, "Tokens"),
    pageError,
    secretBox,
    h("section", { class: "card" }, h("h2", {}, "Tokens"), list.el),
    h("section", { class: "card form-card" }, h("h2", {}, "New token"), form),
  );

  const showError = (err) => {
    replace(pageError, err ? (err.unreachable ? err.message : `${err.status}: ${err.message}`) : "");
    pageError.hidden = !err;
  };

  const showSecret = (token) => {
    const code = h("code", { id: "token-secret-value" }, token.secret);
    const copied = h("span", { class: "muted", role: "status" });
    const copy = h("button", { type: "button", class: "btn btn-small", id: "token-copy" }, "Copy");
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(token.secret);
        copied.textContent = "Copied.";
      } catch {
        // No clipboard (plain http on another host): select it for a manual copy.
        const range = document.createRange();
        range.selectNodeContents(code);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        copied.textContent = "Selected: press Ctrl+C to copy.";
      }
    });
    const hide = h("button", { type: "button", class: "btn btn-small btn-quiet" }, "I have saved it");
    hide.addEventListener("click", () => {
      secretBox.hidden = true;
      secretBox.replaceChildren(); // the secret leaves the page
    });
    replace(
      secretBox,
      h("h2", {}, `Secret of '${token.name}'`),
      h(
        "p",
        { class: "notice", role: "alert" },
        "Copy it now: it is shown this once. The gateway keeps only its hash; a lost secret means a new token.",
      ),
      h("div", { class: "secret" }, code, copy, copied),
      hide,
    );
    secretBox.hidden = false;
  };

  const buildRow = (t) =>
    h(
      "tr",
      { dataset: { token: String(t.id), name: t.name } },
      td("Name", h("strong", {}, t.name)),
      td("Scopes", t.scopes.join(", ")),
      td("Prefix", h("code", {}, `${t.prefix}…`)),
      td("Created", fmtTime(t.created_at)),
      td("Last used", t.last_used_at ? fmtAgo(t.last_used_at) : "never"),
      td(
        "State",
        t.revoked_at
          ? [stateBadge("revoked"), h("div", { class: "reason" }, fmtTime(t.revoked_at))]
          : stateBadge("active"),
      ),
      td(
        "",
        t.revoked_at
          ? null
          : confirmButton("Revoke", (button) => revoke(t, button), {
              class: "btn btn-small btn-quiet",
              dataset: { action: "revoke" },
              title: auth.name === t.name ? "the token you are signed in with" : null,
            }),
        "row-actions",
      ),
    );

  const render = () =>
    syncRows(list.tbody, tokens, (t) => t.id, buildRow, (t) => JSON.stringify(t));

  const load = async () => {
    try {
      tokens = await apiAll("/v1/tokens");
      showError(null);
      render();
    } catch (err) {
      showError(err);
    }
  };

  const revoke = async (t, button) => {
    button.disabled = true;
    try {
      await api(`/v1/tokens/${t.id}`, { method: "DELETE" });
      await load();
    } catch (err) {
      button.disabled = false;
      showError(err);
    }
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const scopes = [...form.querySelectorAll("input[name=scopes]:checked")].map((i) => i.value);
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      const token = await api("/v1/tokens", { method: "POST", body: { name: nameInput.value.trim(), scopes } });
      form.reset();
      showSecret(token);
      await load();
    } catch (err) {
      if (err.status === 422) showErrors(form, err);
      else showError(err);
    } finally {
      submit.disabled = false;
    }
  });

  load();
  const timer = setInterval(load, 10000);
  return () => clearInterval(timer);
}
