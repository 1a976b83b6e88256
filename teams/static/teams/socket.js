// One live connection for a page: reconnects after a drop (the page says so while
// it is down) and gives up, telling the reader why, when the server closes it for a
// reason a retry cannot fix (the close codes in teams/consumers.py).
// The socket only listens: the server closes it (4400) if the page ever sends.
(function () {
  "use strict";
  const FINAL = {
    4403: "Live updates stopped: you may no longer see this (or your session ended). Reload the page.",
    4400: "Live updates stopped: the page sent the server something it does not accept. Reload the page.",
    4429: "Live updates stopped: you have too many live pages open. Close some, then reload this one.",
  };

  function notice(text) {
    const box = document.getElementById("live-notice");
    box.textContent = text;
    box.hidden = !text;
  }

  // path(): the socket path, asked again on every (re)connect; handlers: event name -> fn.
  // Returns {reconnect()}: drop this connection and open the next one at once (a page
  // that sees a gap in the events' numbers catches up that way).
  window.loomLive = function (path, handlers) {
    let ws = null;
    let again = false;
    function connect() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = ws = new WebSocket(`${scheme}://${location.host}${path()}`);
      socket.onmessage = (message) => {
        if (socket !== ws) return; // a connection being replaced
        const event = JSON.parse(message.data);
        const handle = handlers[event.event];
        if (handle) handle(event);
      };
      socket.onopen = () => { document.body.dataset.live = "on"; notice(""); };
      socket.onclose = (closed) => {
        if (closed.code in FINAL) {
          document.body.dataset.live = "refused";
          notice(FINAL[closed.code]);
          return;
        }
        if (again) {
          again = false;
          connect();
          return;
        }
        if (document.body.dataset.live === "on") notice("Connection lost; reconnecting…");
        document.body.dataset.live = "off";
        setTimeout(connect, 2000);
      };
    }
    connect();
    return {
      reconnect() {
        if (again || !ws) return;
        again = true;
        const old = ws;
        ws = null;
        old.close();
      },
    };
  };
})();
