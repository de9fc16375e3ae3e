/* The search page, on top of Sphinx's searchtools.js (loaded only on search.html,
   with page_texts.js, by tools/search_cjk.py).

   1. Snippets: Sphinx cuts the snippet under each result from the result's page,
      which it fetches; a browser refuses fetch() on file://, where this site is read.
      The text of every page is in BOOK_PAGE_TEXTS instead, and fetch() of a page of
      this site is answered from it (anything else goes to the real fetch).
   2. Highlighting: a Chinese query is looked up as pairs of characters (明月光 as
      明月 and 月光); the page a result opens highlights the whole run first, then
      the pairs, so that 床前明月光 is marked as one piece where it occurs as one. */
"use strict";

(() => {
  const texts = window.BOOK_PAGE_TEXTS || {};
  const siteRoot = new URL(document.documentElement.dataset.content_root || "./",
                           document.baseURI);
  const suffix = DOCUMENTATION_OPTIONS.FILE_SUFFIX || ".html";
  const escapeHTML = (text) => text.replace(/[&<>]/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);

  const realFetch = window.fetch.bind(window);
  window.fetch = (resource, options) => {
    const url = new URL(typeof resource === "string" ? resource : resource.url,
                        document.baseURI);
    const path = url.href.split(/[?#]/)[0];
    if (path.startsWith(siteRoot.href) && path.endsWith(suffix)) {
      const docname = decodeURIComponent(path.slice(siteRoot.href.length, -suffix.length));
      if (Object.hasOwn(texts, docname)) {
        const html = `<div role="main">${escapeHTML(texts[docname])}</div>`;
        return Promise.resolve(new Response(html, { headers: { "Content-Type": "text/html" } }));
      }
    }
    return realFetch(resource, options);
  };

  const hanRun = new RegExp(HAN_RUN.source, "gu");  // from language_data.js (search_cjk.py)
  const parseQuery = Search._parseQuery;
  Search._parseQuery = (query) => {
    const parsed = parseQuery(query);
    const runs = (query.toLowerCase().match(hanRun) || []).filter((run) => [...run].length > 2);
    if (runs.length) {
      const highlightTerms = new Set([...runs, ...parsed[3]]);
      parsed[3] = highlightTerms;
      localStorage.setItem("sphinx_highlight_terms", [...highlightTerms].join(" "));
    }
    return parsed;
  };
})();
