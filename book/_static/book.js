/* The book's own behaviour, on top of sphinx-book-theme.

   Figures open full size (below): a figure is drawn at the width of the text column, where the
   numbers on a heat map can be too small to read. Clicking it (or Enter on it) shows it
   at its own size in a dialog that scrolls; Escape, the button or a click closes it. */
"use strict";

/* Search terms are highlighted on the page that a search result opens. Sphinx's
   sphinx_highlight.js does it only where searchtools.js is absent, and the theme loads
   searchtools.js on every page (for its search field), so it never did: do it here on
   every page but the search page itself. */
(() => {
  const highlight = () => {
    // SphinxHighlight is a const of sphinx_highlight.js: global, but not a property of window.
    if (document.getElementById("search-results") || typeof SphinxHighlight === "undefined")
      return;
    SphinxHighlight.highlightSearchWords();
    // It marks the terms a moment later; then bring the first one into view.
    setTimeout(() => document.querySelector("article span.highlighted")
      ?.scrollIntoView({ block: "center" }), 50);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", highlight);
  else highlight();
})();

(() => {
  const FIGURES = "article figure img, article div.cell_output img";

  const lightbox = () => {
    let dialog = document.querySelector("dialog.book-lightbox");
    if (dialog) return dialog;
    dialog = document.createElement("dialog");
    dialog.className = "book-lightbox";
    dialog.setAttribute("aria-label", "Figure at full size");
    dialog.innerHTML = '<div class="book-lightbox-scroll"><img alt=""></div>'
      + '<button type="button" class="btn btn-sm btn-secondary">Close</button>';
    // Escape closes it (sphinx_highlight.js cancels Escape's default, which would).
    dialog.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        dialog.close();
      }
    });
    dialog.addEventListener("click", () => dialog.close());  // anywhere: the figure too
    document.body.appendChild(dialog);
    return dialog;
  };

  const open = (image) => {
    const dialog = lightbox();
    const big = dialog.querySelector("img");
    big.src = image.currentSrc || image.src;
    big.alt = image.alt;
    dialog.showModal();
  };

  const setUp = () => {
    document.querySelectorAll(FIGURES).forEach((image) => {
      image.tabIndex = 0;
      image.title = "Show at full size";
      image.addEventListener("click", () => open(image));
      image.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          open(image);
        }
      });
    });
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUp);
  else setUp();
})();
