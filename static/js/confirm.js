// Forms with data-confirm ask before they submit (instead of inline onsubmit handlers, which the
// Content-Security-Policy forbids).
(function () {
  "use strict";
  document.addEventListener("submit", (event) => {
    const form = event.target.closest && event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
})();
