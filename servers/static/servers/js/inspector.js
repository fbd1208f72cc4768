// The "call a tool" page: keep the schema form and the raw-JSON arguments in step when switching modes.
// Both inputs stay in the form (CSS shows the chosen one), so nothing typed is lost; this script only
// copies values across: form -> JSON when the JSON box was not edited by hand, JSON -> form when the
// JSON is a valid object (invalid JSON is left as typed, and the form as it was).
(function () {
  "use strict";

  function fields(form) {
    return Array.prototype.slice.call(form.querySelectorAll(".form-mode .field[data-param]"));
  }

  function input(field) {
    return field.querySelector("input, select, textarea");
  }

  function valueOf(field) {
    var el = input(field);
    var text = el ? el.value : "";
    var kind = field.dataset.kind;
    if (text === "") return undefined;
    if (kind === "string") return text;
    if (kind === "integer" || kind === "number") {
      var n = Number(text);
      return text.trim() !== "" && isFinite(n) ? n : text;
    }
    if (kind === "boolean") return text === "true";
    try {
      return JSON.parse(text); // enum options and json fields hold JSON text
    } catch (e) {
      return text;
    }
  }

  function setValue(field, value) {
    var el = input(field);
    if (!el) return;
    var kind = field.dataset.kind;
    var text;
    if (value === undefined) text = "";
    else if (kind === "string") text = typeof value === "string" ? value : JSON.stringify(value);
    else if (kind === "integer" || kind === "number") text = String(value);
    else if (kind === "boolean") text = value ? "true" : "false";
    else if (kind === "enum") text = JSON.stringify(value);
    else text = JSON.stringify(value, null, 2);
    if (el.tagName === "SELECT" && !Array.prototype.some.call(el.options, function (o) { return o.value === text; })) {
      return; // a value the form cannot show: the JSON box keeps it
    }
    el.value = text;
  }

  function formToJson(form, box) {
    var out = {};
    fields(form).forEach(function (field) {
      var v = valueOf(field);
      if (v !== undefined) out[field.dataset.param] = v;
    });
    box.value = JSON.stringify(out, null, 2);
    box.dataset.filled = box.value;
  }

  function jsonToForm(form, box) {
    var parsed;
    try {
      parsed = JSON.parse(box.value);
    } catch (e) {
      return;
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return;
    fields(form).forEach(function (field) {
      setValue(field, parsed[field.dataset.param]);
    });
  }

  function pristine(box) {
    var text = box.value.trim();
    return text === "" || text === "{}" || box.value === box.dataset.filled;
  }

  document.addEventListener("change", function (event) {
    var radio = event.target;
    if (!(radio instanceof HTMLInputElement) || radio.name !== "mode") return;
    var form = radio.closest("form.call-form");
    var box = form && form.querySelector(".json-mode textarea");
    if (!box) return;
    if (radio.value === "json" && radio.checked && pristine(box)) formToJson(form, box);
    if (radio.value === "form" && radio.checked) jsonToForm(form, box);
  });
})();
