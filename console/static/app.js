// freqcap console: live refresh without a framework.
//
// Every element carrying data-live="URL" has its contents replaced, every
// data-every milliseconds (default 1000), by the HTML fragment the server
// renders at URL: the same templ component the page was rendered with, so
// the page works unchanged without JavaScript (reload to refresh). The
// fragment is escaped by the server like the page itself. A <details>
// carrying data-keep="NAME" keeps its open or closed state across
// refreshes (the fragment always renders it closed).
(function () {
  "use strict";

  function start(el) {
    var url = el.getAttribute("data-live");
    var every = parseInt(el.getAttribute("data-every"), 10) || 1000;
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) {
        return;
      }
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.text();
        })
        .then(function (html) {
          var open = {};
          el.querySelectorAll("details[data-keep]").forEach(function (d) {
            open[d.getAttribute("data-keep")] = d.open;
          });
          el.innerHTML = html;
          el.querySelectorAll("details[data-keep]").forEach(function (d) {
            var k = d.getAttribute("data-keep");
            if (Object.prototype.hasOwnProperty.call(open, k)) {
              d.open = open[k];
            }
          });
          el.removeAttribute("data-stale");
        })
        .catch(function () {
          el.setAttribute("data-stale", "true");
        })
        .finally(function () {
          busy = false;
        });
    }, every);
  }

  document.querySelectorAll("[data-live]").forEach(start);
  document.documentElement.classList.add("js");
})();
