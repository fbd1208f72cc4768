// The run page's trace: places the waterfall's bars and opens or closes every step.
// Bars are positioned through the CSSOM (element.style), which the CSP allows; the page
// carries only data-offset-ms / data-duration-ms attributes, never a style attribute.
(function () {
  "use strict";

  function layout(root) {
    var lists = (root || document).querySelectorAll ? (root || document).querySelectorAll("#waterfall") : [];
    if (root && root.id === "waterfall") lists = [root];
    Array.prototype.forEach.call(lists, function (list) {
      var total = parseFloat(list.getAttribute("data-total-ms")) || 0;
      list.querySelectorAll(".wf-row").forEach(function (row) {
        var bar = row.querySelector(".wf-bar");
        if (!bar) return;
        var offset = parseFloat(row.getAttribute("data-offset-ms")) || 0;
        var raw = row.getAttribute("data-duration-ms");
        var duration = raw === "" || raw === null ? null : parseFloat(raw);
        var left = total > 0 ? Math.min(Math.max((offset / total) * 100, 0), 100) : 0;
        var width = total > 0 && duration !== null ? (duration / total) * 100 : 0;
        width = Math.min(Math.max(width, 0.3), 100 - left); // a 0.1 ms span is still visible
        bar.style.left = left.toFixed(3) + "%";
        bar.style.width = width.toFixed(3) + "%";
        if (duration === null) bar.classList.add("wf-open");
      });
      list.classList.add("wf-ready");
    });
  }

  function toggleAll(open) {
    document.querySelectorAll("#timeline-card details, #waterfall-card details").forEach(function (d) {
      d.open = open;
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-trace-details]") : null;
    if (!button) return;
    toggleAll(button.getAttribute("data-trace-details") === "open");
  });

  document.addEventListener("DOMContentLoaded", function () { layout(document); });
  // The final poll of a live run swaps a new waterfall in (hx-swap-oob).
  document.addEventListener("htmx:afterSettle", function () { layout(document); });
  document.addEventListener("htmx:oobAfterSwap", function () { layout(document); });
  if (document.readyState !== "loading") layout(document);
})();
