"""A deterministic stand-in for Claude: the model id `loom-offline`, the default when
no ANTHROPIC_API_KEY is set.

It speaks the same protocol as the Anthropic provider and exercises every mechanism of a
conversation: short messages, passes, one ask_pm from the coach, and phase
completion, so the demo shows the product with no key. Every message it writes
says it comes from the offline model."""

from __future__ import annotations

import re
import time
import zlib

from django.conf import settings

from teams.catalog import OFFLINE_MODEL, Usage
from teams.engine.reply import ModelReply
from teams.keepers import SMART_SYSTEM
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete

IDENTITY = re.compile(r"Your name is (?P<name>[\w-]+) and your role is (?P<role>\w+)\.")

LINES = {
    "coach": [
        "Let's agree on scope first: what is the smallest version that meets the goal?",
        "Summary so far: the plan is converging. Anything blocking before we move on?",
        "Good points. Let's capture decisions and open questions before we continue.",
    ],
    "researcher": [
        "Prior art suggests keeping the input format strict and the output predictable.",
        "I checked the options: the simplest library covers our needs without extras.",
        "One risk: edge cases in the input. We should list them before building.",
    ],
    "coder": [
        "I can structure this as three small modules with one entry point.",
        "The interface could be a single function taking a path and returning a report.",
        "I'd start with the parser, then the renderer, then the command-line wrapper.",
    ],
    "reviewer": [
        "The plan reads well; I'd ask for tests on the edge cases the researcher raised.",
        "Naming is clear. Let's keep error messages specific to the input that failed.",
        "I'd like one end-to-end test before we call this phase done.",
    ],
}
DEFAULT_LINES = ["I have a small addition: let's keep this simple and testable."]


def _text_of(message: dict) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") or str(b.get("content", "")) for b in content)


class OfflineProvider:
    def respond(self, *, model, system, messages, tools, max_tokens=0, on_text=None):
        system_text = "\n".join(b["text"] for b in system)
        if system_text.startswith(SMART_SYSTEM):
            return self._keeper_answer(messages[-1]["content"])
        match = IDENTITY.search(system_text)
        name, role = (match["name"], match["role"]) if match else ("agent", "agent")
        tool_names = {t["name"] for t in tools}
        transcript = "\n".join(_text_of(m) for m in messages)
        last = messages[-1] if messages else {"content": ""}
        input_tokens = (len(system_text) + len(transcript)) // 4

        if isinstance(last["content"], list) and any(
            b.get("type") == "tool_result" for b in last["content"]
        ):
            return self._reply([], "end_turn", input_tokens)

        lines = transcript.count("\n[")
        pm_seen = "[pm" in transcript or "PM input received" in transcript
        if role == "coach" and AskPm.name in tool_names and not pm_seen and lines >= 3:
            return self._tool(
                AskPm.name,
                {"question": "Which output format should we prioritise: HTML only, or also PDF?"},
                input_tokens,
            )
        if role == "coach" and SignalPhaseComplete.name in tool_names and pm_seen:
            # Lines since the phase began or the PM last spoke.
            mark = max(transcript.rfind("[pm"), transcript.rfind("Phase advanced to"))
            if transcript[mark:].count("\n[") >= 8:
                summary = "PM input received. The team agreed on scope and next steps."
                return self._tool(SignalPhaseComplete.name, {"summary": summary}, input_tokens)
        seed = zlib.crc32(f"{name}:{lines}:{len(transcript)}".encode())
        if role != "coach" and PassTurn.name in tool_names and seed % 3 == 0:
            return self._tool(
                PassTurn.name, {"reason": "agree with the current proposal"}, input_tokens
            )
        options = LINES.get(role, DEFAULT_LINES)
        text = f"{options[seed % len(options)]} (offline model)"
        words = text.split(" ")
        chunks = [
            " ".join(words[i : i + 4]) + (" " if i + 4 < len(words) else "")
            for i in range(0, len(words), 4)
        ]
        for chunk in chunks:
            # Paced like a real model so people can watch the demo; 0 in tests and bench.
            if settings.LOOM_OFFLINE_DELAY:
                time.sleep(settings.LOOM_OFFLINE_DELAY / len(chunks))
            if on_text is not None:
                on_text(chunk)
        return self._reply([{"type": "text", "text": text}], "end_turn", input_tokens)

    def _keeper_answer(self, prompt: str):
        """Smart retrieval, offline: the excerpts that share most words with the question."""
        excerpts, _, question = prompt.rpartition("\n\nQuestion: ")
        wanted = {w for w in re.findall(r"\w+", question.lower()) if len(w) > 3}
        lines = [line for line in excerpts.splitlines()[1:] if line.strip()]
        scored = sorted(
            lines, key=lambda line: -len(wanted & set(re.findall(r"\w+", line.lower())))
        )
        best = [line for line in scored[:3] if wanted & set(re.findall(r"\w+", line.lower()))]
        text = "NOT_FOUND" if not best else "From the keepers (offline model):\n" + "\n".join(best)
        return self._reply([{"type": "text", "text": text}], "end_turn", len(prompt) // 4)

    def _tool(self, name, arguments, input_tokens):
        if settings.LOOM_OFFLINE_DELAY:
            time.sleep(settings.LOOM_OFFLINE_DELAY / 2)
        call_id = f"toolu_offline_{zlib.crc32(repr((name, arguments)).encode()):08x}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        return self._reply([block], "tool_use", input_tokens)

    def _reply(self, content, stop_reason, input_tokens):
        output = sum(len(str(b)) for b in content) // 4
        return ModelReply(
            content=content,
            stop_reason=stop_reason,
            model=OFFLINE_MODEL,
            usage=Usage(input_tokens=input_tokens, output_tokens=output),
        )
