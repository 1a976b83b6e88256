"""The offline model as a provider: reads the request, makes the next move, and
answers in the shape every provider returns (teams.engine.reply.ModelReply)."""

from __future__ import annotations

import re
import time
import zlib

from django.conf import settings

from teams.conversation.keepers import SMART_SYSTEM
from teams.engine.offline.moves import Reading, next_move
from teams.engine.offline.transcript import IDENTITY, text_of
from teams.engine.reply import ModelReply
from teams.lib.catalog import OFFLINE_MODEL, Usage


class OfflineProvider:
    def respond(self, *, model, system, messages, tools, max_tokens=0, on_text=None):
        system_text = "\n".join(b["text"] for b in system)
        if system_text.startswith(SMART_SYSTEM):
            return self._keeper_answer(messages[-1]["content"])
        match = IDENTITY.search(system_text)
        name, role = (match["name"], match["role"]) if match else ("agent", "agent")
        input_tokens = (len(system_text) + len("\n".join(text_of(m) for m in messages))) // 4
        reading = Reading.of(
            name=name,
            role=role,
            system_text=system_text,
            tool_names={t["name"] for t in tools},
            messages=messages,
        )
        move = next_move(reading)
        if move is None:
            return self._reply([], "end_turn", input_tokens)
        if move.tool is not None:
            return self._tool(move.tool.name, move.arguments, input_tokens, move.line)
        return self._say(move.line, input_tokens, on_text)

    def _say(self, line, input_tokens, on_text):
        """The agent's line, marked as the offline model's, streamed in small chunks."""
        text = f"{line} (offline model)"
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

    def _tool(self, name, arguments, input_tokens, why=""):
        """A tool call, with the reason said beside it when the move has one."""
        if settings.LOOM_OFFLINE_DELAY:
            time.sleep(settings.LOOM_OFFLINE_DELAY / 2)
        call_id = f"toolu_offline_{zlib.crc32(repr((name, arguments)).encode()):08x}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        said = [{"type": "text", "text": f"{why} (offline model)"}] if why else []
        return self._reply([*said, block], "tool_use", input_tokens)

    def _reply(self, content, stop_reason, input_tokens):
        output = sum(len(str(b)) for b in content) // 4
        return ModelReply(
            content=content,
            stop_reason=stop_reason,
            model=OFFLINE_MODEL,
            usage=Usage(input_tokens=input_tokens, output_tokens=output),
        )
