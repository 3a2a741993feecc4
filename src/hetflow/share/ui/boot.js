// Loaded by index.html as a file, not inline: the dashboard's Content-Security-Policy allows
// only the page's own script files (hetflow/ui/auth.py, CSP); the gate lets this one file
// through without the token, which a <script src> cannot carry.
// When the server asks for a token, every path needs it, the page's own files too, and a
// <script src> cannot send a header: keep ?token= (it stays in the address bar so a reload
// works), remember it for this tab, and load the CSS and scripts with it. The vendored
// libraries (no CDN) are listed in static/vendor/README.md; Chart.js loads when Plans needs it.
(function () {
  var key = "hetflow.token";
  var given = new URLSearchParams(location.search).get("token");
  if (given) sessionStorage.setItem(key, given);
  var token = sessionStorage.getItem(key);
  var q = token ? "?token=" + encodeURIComponent(token) : "";
  window.hetflowAsset = function (path) { return path + q; };
  var css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = "static/app.css" + q;
  document.head.appendChild(css);
  ["static/vendor/dagre.min.js", "static/app.js"].forEach(function (src) {
    var s = document.createElement("script");
    s.src = src + q;
    s.async = false;
    s.onerror = function () {
      var e = document.getElementById("error");
      e.textContent = "could not load " + src + (token ? " (is the token right?)" : "");
      e.hidden = false;
    };
    document.body.appendChild(s);
  });
})();
