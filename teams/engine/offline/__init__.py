"""A deterministic stand-in for Claude: the model id `loom-offline`, the default when
no ANTHROPIC_API_KEY is set.

It speaks the same protocol as the Anthropic provider and exercises every mechanism of a
conversation, so the demo shows the product with no key. Every message it writes says
it comes from the offline model, and its lines are about the team's goal (the subject
it names: "a haiku generator", "the parser").

What it does, all decided from the request alone (the history, the anchors in the
system prompt, the tools offered), so the same request always gets the same reply:

- Conversation: short lines, passes (now and then, and always right after a peer's
  answer), one ask_pm from the coach (its third line in the first phase), and phase
  completion with a summary of what happened in the phase (who spoke, the PM's word
  if the PM spoke in it, the questions, files, keepers and consultations). The coach
  holds a phase open while a peer question asked in it is still unanswered.
- Questions between agents: in the first phase the researcher asks the agent who spoke
  after its first line (the coder) a question, which that agent answers; in the second
  phase the coder asks the agent who spoke before its first line (the researcher) a
  question naming, with @, the agent who spoke after it (the reviewer): a question that
  names another agent is forwarded to it, which answers. An agent handles a question in
  its inbox once (its line names the query's id) and only in the phase it arrived.
- Keepers: in the first phase, once the PM has spoken, the reviewer offloads its older
  context to a keeper, and on its next turn recalls it (smart retrieval: the keeper's
  question comes back here under SMART_SYSTEM and gets the excerpts that share most
  words with it).
- The mesh: each agent declares its intent (trajectory, tactic and action) when it
  first speaks in a phase and maps its tactic again every few turns; the coach pins
  the PM's latest word as an anchor and checks its drift before completing a phase.
- The workspace and the consultants: in the implementation phase the coder writes one
  small file (OFFLINE_FILE) and says so, and the reviewer, on a later turn, reads the
  file the coder said it wrote and says so; in the team's second phase the coach asks
  every consultant once for a second opinion on the plan.

A mesh, question, keeper, file or consultation tool does not end the turn: after its
result the agent goes on to write its line, which says what it did (which is how it
knows, on a later turn, not to do it again).

The package: `transcript` reads the request, `moves` decides, `lines` words it,
`provider` answers in the Messages API's shape."""

from teams.engine.offline.lines import OFFLINE_FILE, PM_ANCHOR
from teams.engine.offline.provider import OfflineProvider
from teams.engine.offline.transcript import IDENTITY, subject_of

__all__ = ["IDENTITY", "OFFLINE_FILE", "PM_ANCHOR", "OfflineProvider", "subject_of"]
