// One live connection for a page: reconnects after a drop (the page says so while
// it is down) and gives up, telling the reader why, when the server refuses access.
(function () {
  "use strict";
  const ACCESS_REFUSED = 4403;

  function notice(text) {
    const box = document.getElementById("live-notice");
    box.textContent = text;
    box.hidden = !text;
  }

  // path(): the socket path, asked again on every (re)connect; handlers: event name -> fn.
  window.loomLive = function (path, handlers) {
    function connect() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const ws = new WebSocket(`${scheme}://${location.host}${path()}`);
      ws.onmessage = (message) => {
        const event = JSON.parse(message.data);
        const handle = handlers[event.event];
        if (handle) handle(event);
      };
      ws.onopen = () => { document.body.dataset.live = "on"; notice(""); };
      ws.onclose = (closed) => {
        if (closed.code === ACCESS_REFUSED) {
          document.body.dataset.live = "refused";
          notice("Live updates stopped: you may no longer see this (or your session ended). Reload the page.");
          return;
        }
        if (document.body.dataset.live === "on") notice("Connection lost; reconnecting…");
        document.body.dataset.live = "off";
        setTimeout(connect, 2000);
      };
    }
    connect();
  };
})();
