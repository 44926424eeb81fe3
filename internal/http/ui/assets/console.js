// Progressive enhancement: refresh the approvals inbox without reloading.
// The page works without it (the lists are rendered on the server).
(function () {
  "use strict";
  var box = document.getElementById("inbox");
  if (!box || !window.fetch) { return; }
  var version = box.getAttribute("data-version");
  var busy = false;
  function editing() {
    var a = document.activeElement;
    return a && box.contains(a) && a.tagName === "INPUT" && a.value !== "";
  }
  function poll() {
    if (busy || document.hidden || editing()) { return; }
    busy = true;
    fetch("/ui/inbox?v=" + encodeURIComponent(version), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        // Sent to sign in: the session ended; show that page instead.
        if (r.redirected) { window.location.reload(); return null; }
        if (r.status !== 200) { return null; }
        version = r.headers.get("X-Inbox-Version") || version;
        return r.text();
      })
      .then(function (html) {
        if (html !== null) { box.innerHTML = html; box.setAttribute("data-version", version); }
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  setInterval(poll, 2000);
  document.addEventListener("visibilitychange", poll);
}());
