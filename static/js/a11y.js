// Accessibility helpers that need the live page (issue 16; checked by tests/e2e/test_accessibility.py).
(function () {
  "use strict";

  // 1. Keyboard focus across htmx swaps. htmx itself moves focus to the element with the same id in
  // the new content (so the rule list's move buttons carry ids). When that element is now disabled (a
  // rule moved to the end has no "down" button), focus would fall to the page: give it to the first
  // enabled button of the same form instead (the rule's "up"), so a keyboard user keeps their place.
  // The focused id is kept per request (keyed by its XHR): another swap settling in between (the tester
  // refreshing after a move) must neither see nor clear this one's.
  const focusedIds = new WeakMap();
  document.addEventListener("htmx:beforeSwap", function (event) {
    const active = document.activeElement;
    if (active && active !== document.body && active.id && event.detail.xhr) {
      focusedIds.set(event.detail.xhr, active.id);
    }
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    const xhr = event.detail.xhr;
    const focusedId = xhr ? focusedIds.get(xhr) : null;
    if (focusedId) {
      focusedIds.delete(xhr);
      const again = document.getElementById(focusedId);
      const lost = !document.activeElement || document.activeElement === document.body;
      if (again && again.disabled && (lost || document.activeElement === again)) {
        const container = again.closest("form") || again.parentElement;
        const other = container && container.querySelector("button:not([disabled])");
        if (other) other.focus();
      }
    }
    markScrollables();
  });

  // 2. A box that scrolls (a wide table on a phone, a long JSON block) must be reachable from the
  // keyboard to be scrolled: give it tabindex=0 when it scrolls and holds nothing focusable itself.
  const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";
  function scrolls(el) {
    const style = getComputedStyle(el);
    const x = /(auto|scroll)/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    const y = /(auto|scroll)/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }
  function markScrollables() {
    document.querySelectorAll("main pre, main table, main .flow-graph, main [data-scroll-box]").forEach(function (el) {
      const added = el.getAttribute("data-a11y-tabindex") === "1";
      if (scrolls(el)) {
        if (!el.hasAttribute("tabindex") && !el.querySelector(FOCUSABLE)) {
          el.setAttribute("tabindex", "0");
          el.setAttribute("data-a11y-tabindex", "1");
        }
      } else if (added) {
        el.removeAttribute("tabindex");
        el.removeAttribute("data-a11y-tabindex");
      }
    });
  }
  let pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(markScrollables, 150);
  });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", markScrollables);
  else markScrollables();
})();
