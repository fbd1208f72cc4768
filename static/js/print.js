// Printing opens every collapsed <details> (a printout cannot be clicked open) and closes again
// the ones that were closed once the print dialog is done.
(function () {
  let opened = [];
  window.addEventListener("beforeprint", function () {
    opened = Array.from(document.querySelectorAll("details:not([open])"));
    opened.forEach(function (el) { el.open = true; });
  });
  window.addEventListener("afterprint", function () {
    opened.forEach(function (el) { el.open = false; });
    opened = [];
  });
  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-print]");
    if (button) { event.preventDefault(); window.print(); }
  });
})();
