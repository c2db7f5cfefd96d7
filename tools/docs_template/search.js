// Search over every page of the cvlc site, offline: the index is a script (search_index.js), so it also works
// from file:// where fetch() is refused. A section matches when it contains every word of the query; words in a
// page or section title weigh more. `?q=words` in a page's address runs a search on load.
(function () {
  "use strict";
  var input = document.getElementById("cvlc-search-input");
  var list = document.getElementById("cvlc-search-results");
  var docs = window.CVLC_SEARCH;
  if (!input || !list || !docs) return;
  var root = document.body.getAttribute("data-root") || "";
  var lower = docs.map(function (d) { return { head: (d.p + " " + d.h).toLowerCase(), text: d.t.toLowerCase() }; });

  function count(text, term) {
    var n = 0, i = text.indexOf(term);
    while (i !== -1 && n < 20) { n += 1; i = text.indexOf(term, i + term.length); }
    return n;
  }

  function search(query) {
    var terms = query.toLowerCase().split(/\s+/).filter(Boolean);
    if (!terms.length) return { terms: terms, hits: [] };
    var hits = [];
    docs.forEach(function (d, i) {
      var score = 0;
      for (var k = 0; k < terms.length; k++) {
        var inHead = lower[i].head.indexOf(terms[k]) !== -1, n = count(lower[i].text, terms[k]);
        if (!inHead && !n) return;
        score += (inHead ? 10 : 0) + Math.min(n, 3);  // presence counts, repetition little: long sections do not win
      }
      hits.push({ score: score, i: i });
    });
    hits.sort(function (a, b) { return b.score - a.score || a.i - b.i; });
    return { terms: terms, hits: hits.slice(0, 15) };
  }

  function snippet(text, terms) {
    var low = text.toLowerCase(), at = -1;
    terms.forEach(function (t) { var j = low.indexOf(t); if (j !== -1 && (at === -1 || j < at)) at = j; });
    var start = Math.max(0, at - 60);
    return (start > 0 ? "\u2026" : "") + text.slice(start, start + 160) + (start + 160 < text.length ? "\u2026" : "");
  }

  function highlighted(text, terms) {  // DOM nodes, never innerHTML: page text is not trusted as markup
    var frag = document.createDocumentFragment(), low = text.toLowerCase(), pos = 0;
    while (pos < text.length) {
      var next = -1, len = 0;
      terms.forEach(function (t) { var j = low.indexOf(t, pos); if (j !== -1 && (next === -1 || j < next)) { next = j; len = t.length; } });
      if (next === -1) { frag.appendChild(document.createTextNode(text.slice(pos))); break; }
      if (next > pos) frag.appendChild(document.createTextNode(text.slice(pos, next)));
      var mark = document.createElement("mark"); mark.textContent = text.slice(next, next + len); frag.appendChild(mark);
      pos = next + len;
    }
    return frag;
  }

  function show(query) {
    list.textContent = "";
    var res = search(query);
    if (!query.trim()) { list.hidden = true; return; }
    if (!res.hits.length) {
      var none = document.createElement("li"); none.className = "cvlc-none"; none.textContent = "No page mentions \u201c" + query.trim() + "\u201d";
      list.appendChild(none);
    }
    res.hits.forEach(function (h) {
      var d = docs[h.i], li = document.createElement("li"), a = document.createElement("a");
      a.href = root + d.u;
      var title = document.createElement("strong"); title.textContent = d.h ? d.p + " \u203a " + d.h : d.p;
      var text = document.createElement("span"); text.appendChild(highlighted(snippet(d.t, res.terms), res.terms));
      a.appendChild(title); a.appendChild(text); li.appendChild(a); list.appendChild(li);
    });
    list.hidden = false;
  }

  input.addEventListener("input", function () { show(input.value); });
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter") { var a = list.querySelector("a"); if (a) window.location.href = a.href; }
    if (e.key === "Escape") { list.hidden = true; input.blur(); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "/" && document.activeElement !== input) { e.preventDefault(); input.focus(); }
  });
  var q = new URLSearchParams(window.location.search).get("q");
  if (q) { input.value = q; show(q); }
})();
