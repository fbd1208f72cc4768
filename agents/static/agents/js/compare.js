// The run list's "pick two and compare" and its live rows, and the compare page's "only what differs".
// Loaded by agents/run_list.html and agents/run_compare.html; no inline script (strict CSP).
(function () {
  "use strict";

  // Run list: the Compare button is enabled once exactly two runs are ticked.
  function updateCompareButton() {
    var button = document.getElementById("compare-button");
    if (!button) return;
    var ticked = document.querySelectorAll("input.run-pick:checked").length;
    button.disabled = ticked !== 2;
    var note = document.getElementById("compare-note");
    // The note's text comes from the page, in its language (data-note, with {ticked}).
    var text = (note && note.getAttribute("data-note")) || "tick two runs ({ticked} ticked)";
    if (note) note.textContent = ticked === 2 ? "" : text.replace("{ticked}", ticked);
  }
  document.addEventListener("change", function (event) {
    if (event.target.classList && event.target.classList.contains("run-pick")) updateCompareButton();
    if (event.target.id === "cmp-only-diff") {
      document.getElementById("compare-steps").classList.toggle("cmp-only-diff", event.target.checked);
    }
  });
  document.addEventListener("htmx:afterSwap", updateCompareButton);
  document.addEventListener("DOMContentLoaded", updateCompareButton);

  // The run list polls for new runs; a hidden tab does not ask (the poll resumes when it is shown).
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.id === "run-poller" && document.hidden) event.preventDefault();
  });
})();
