// "Fork from here" on every message of the live view, those the page came with and
// those the live socket adds: the button posts the message's id to the fork form.
(() => {
  const form = document.getElementById("fork-form");
  const conversation = document.getElementById("conversation");
  if (!form || !conversation) return;
  function furnish(li) {
    if (!li.dataset.id || li.querySelector(".fork-here")) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "fork-here";
    button.textContent = "Fork from here";
    button.title = "A new idle team holding this team as of this message";
    button.addEventListener("click", () => {
      form.elements.at_message.value = li.dataset.id;
      form.submit();
    });
    li.appendChild(button);
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
