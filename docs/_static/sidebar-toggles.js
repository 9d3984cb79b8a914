// The sidebar buttons of the article header (the ones a reader sees) do what the theme's own do.
// pydata-sphinx-theme and sphinx-book-theme bind only the first .primary-toggle / .secondary-toggle
// of a page, a hidden one in the navbar (pydata-sphinx-theme#2451): on a phone the visible button
// opened nothing. A click on a visible button is handed to that first one.
"use strict";

function forwardSidebarToggles() {
  for (const kind of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(kind);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", forwardSidebarToggles);
} else {
  forwardSidebarToggles();
}
