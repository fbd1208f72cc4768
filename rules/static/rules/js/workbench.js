// Rule workbench: native drag-and-drop reordering and the params skeleton button.
// Everything here is an enhancement: the up/down buttons and plain forms work without it.
(function () {
  "use strict";
  let dragged = null;
  let before = "";

  const orderOf = (list) => [...list.querySelectorAll("li.rule")].map((li) => li.dataset.ruleId);

  document.addEventListener("dragstart", (event) => {
    const item = event.target.closest && event.target.closest("li.rule[draggable=true]");
    if (!item) return;
    dragged = item;
    before = orderOf(item.parentNode).join(",");
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", item.dataset.ruleId);
    item.classList.add("is-dragging");
  });

  document.addEventListener("dragover", (event) => {
    const over = event.target.closest && event.target.closest("li.rule");
    if (!dragged || !over || over === dragged || over.parentNode !== dragged.parentNode) return;
    event.preventDefault();
    const box = over.getBoundingClientRect();
    const after = event.clientY > box.top + box.height / 2;
    over.parentNode.insertBefore(dragged, after ? over.nextSibling : over);
  });

  document.addEventListener("drop", (event) => {
    if (dragged) event.preventDefault();
  });

  document.addEventListener("dragend", () => {
    if (!dragged) return;
    const list = dragged.parentNode;
    dragged.classList.remove("is-dragging");
    dragged = null;
    const order = orderOf(list);
    if (order.join(",") === before) return;
    htmx.ajax("POST", list.dataset.reorderUrl, {
      target: "#rule-list",
      swap: "outerHTML",
      values: { order: order, revision: list.dataset.revision },
    });
  });

  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("[data-fill-params]");
    if (!button) return;
    const params = document.getElementById("id_rule-params");
    const skeleton = document.getElementById("params-skeleton");
    if (!params || !skeleton) return;
    params.value = skeleton.textContent;
    params.dispatchEvent(new Event("input", { bubbles: true }));
  });
})();
