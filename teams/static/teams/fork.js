// "Fork here" in the head of every message of the live view, those the page came with
// and those the live socket adds: it sits inside its own message's card (shown when the
// card is pointed at or the button has the keyboard's focus), and asks before forking,
// saying what the copy will hold, counted as the page numbers its messages.
(() => {
  const form = document.getElementById("fork-form");
  const dialog = document.getElementById("fork-dialog");
  const conversation = document.getElementById("conversation");
  const config = document.getElementById("live-config");
  if (!form || !dialog || !conversation || !config) return;
  const cfg = JSON.parse(config.textContent);
  let chosen = null;

  function ask(li) {
    const n = Number(li.dataset.n);
    chosen = li.dataset.id;
    dialog.querySelectorAll(".fork-n").forEach((node) => { node.textContent = n; });
    dialog.querySelector(".fork-count").textContent = n === 1 ? "1 message" : `${n} messages`;
    dialog.querySelector(".fork-name").textContent = cfg.fork_name.replace("{n}", n);
    dialog.returnValue = "";
    dialog.showModal();
    dialog.querySelector("#fork-cancel").focus();
  }
  dialog.addEventListener("close", () => {
    if (dialog.returnValue !== "fork" || !chosen) return;
    form.elements.at_message.value = chosen;
    form.submit();
  });

  function furnish(li) {
    if (!li.dataset.id || li.querySelector(".fork-here")) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "fork-here";
    button.textContent = "Fork here";
    button.setAttribute("aria-label", `Fork at message ${li.dataset.n}`);
    button.title = "A new idle team holding this team as of this message (asks first)";
    button.addEventListener("click", () => ask(li));
    (li.querySelector(".msg-head") || li).appendChild(button);
  }
  conversation.querySelectorAll("li[data-id]").forEach(furnish);
  new MutationObserver((changes) => {
    for (const change of changes) {
      change.addedNodes.forEach((node) => {
        if (node.nodeType === 1 && node.matches("li[data-id]")) furnish(node);
      });
    }
  }).observe(conversation, { childList: true });
})();
