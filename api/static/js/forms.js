// Form helpers: a labelled field with a slot for its error, and the mapping of the API's
// validation errors ({loc: ["body", "url"], msg}) onto the fields they name.

import { h, replace } from "./dom.js";

/** The slot showErrors fills with what no field is named for (a form's first child). */
export function formError() {
  return h("p", { class: "form-error", role: "alert", hidden: true });
}

/**
 * A labelled control with its hint and error slot. `control` is an <input>/<select>/...
 * whose name is the API field name (so 422 locations map onto it).
 */
export function field(label, control, hint) {
  const name = control.name;
  const id = `f-${name}`;
  control.id = id;
  const error = h("p", {
    class: "field-error",
    id: `${id}-error`,
    dataset: { errorFor: name },
    hidden: true,
  });
  control.setAttribute("aria-describedby", `${id}-error${hint ? ` ${id}-hint` : ""}`);
  return h(
    "div",
    { class: "field", dataset: { field: name } },
    h("label", { for: id }, label),
    control,
    hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null,
    error,
  );
}

/** Clear every error shown in the form. */
export function clearErrors(form) {
  for (const el of form.querySelectorAll(".field-error, .form-error")) {
    el.hidden = true;
    el.textContent = "";
  }
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

/**
 * Show an ApiError in the form: each 422 issue next to the field its loc names
 * (["body", "topics", 0] -> topics), the rest (409, 404, model-level checks) at the top.
 */
export function showErrors(form, error) {
  clearErrors(form);
  const general = [];
  if (Array.isArray(error.detail)) {
    for (const issue of error.detail) {
      const loc = (issue.loc || []).filter((p) => p !== "body");
      const name = loc.find((p) => typeof p === "string");
      const slot = name && form.querySelector(`[data-error-for="${CSS.escape(name)}"]`);
      if (slot) {
        const where = loc.length > 1 ? ` (${loc.slice(1).join(".")})` : "";
        slot.textContent = slot.textContent ? `${slot.textContent} ${issue.msg}` : `${issue.msg}${where}`;
        slot.hidden = false;
        const folded = slot.closest("details");
        if (folded) folded.open = true; // an error inside "Advanced" must be seen
        form.elements[name]?.setAttribute?.("aria-invalid", "true");
      } else {
        general.push(loc.length ? `${loc.join(".")}: ${issue.msg}` : issue.msg);
      }
    }
  } else {
    general.push(error.unreachable ? error.message : `${error.status}: ${error.message}`);
  }
  const top = form.querySelector(".form-error");
  if (top && general.length) {
    replace(top, general.join(" "));
    top.hidden = false;
  }
  form.querySelector('[aria-invalid="true"]')?.focus();
}

/** A number input's value, or undefined when it is empty (the API's default applies). */
export function numberOrUndefined(input) {
  const text = input.value.trim();
  return text === "" ? undefined : Number(text);
}
