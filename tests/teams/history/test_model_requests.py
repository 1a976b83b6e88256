"""A model call's request as kept with its step (teams.history.model_requests)."""

import pytest

from teams.history.model_requests import (
    request_digest,
    request_pack,
    request_packed,
    request_unpack,
)

REQUESTS = [
    {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Ünïcode — kept as written", "cache_control": {}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "line\u2028two"}]}],
        "tools": [{"name": "pass_turn", "input_schema": {"type": "object", "properties": {}}}],
    },
    {"model": "offline", "max_tokens": 10, "system": [], "messages": []},  # no tools offered
]


@pytest.mark.parametrize("request_", REQUESTS)
def test_the_kept_copy_reads_back_as_sent_under_the_same_digest(request_):
    packed, digest = request_packed(request_)
    assert request_unpack(packed) == request_
    assert digest == request_digest(request_)
    assert request_unpack(request_pack(request_)) == request_


def test_the_digest_is_of_what_the_model_is_shown_only():
    shown = REQUESTS[0]
    other_model = {**shown, "model": "claude-haiku-4-5", "max_tokens": 1}
    other_text = {**shown, "system": [{"type": "text", "text": "Another system."}]}
    assert request_digest(other_model) == request_digest(shown)
    assert request_digest(other_text) != request_digest(shown)


def test_the_kept_copy_is_canonical_json_byte_for_byte_whatever_the_blocks():
    """Text blocks are encoded once and kept by their text (teams.history.model_requests): the
    packed copy must still be exactly the canonical JSON, the second time as the first."""
    import json
    import zlib

    repeated = 'said twice — "quoted"\n\u2028'
    request_ = {
        "model": "m",
        "max_tokens": 5,
        "system": [],
        "messages": [
            {"role": "user", "content": "a plain string"},
            {"role": "user", "content": [{"type": "text", "text": repeated}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": repeated},
                    {"type": "note", "text": repeated},
                    {"type": "text", "text": "marked", "cache_control": {"type": "ephemeral"}},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "pass_turn",
                        "input": {"b": 1, "a": 2},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
            {"role": "user", "content": [{"type": "text", "text": 7}], "extra": True},
        ],
    }
    canonical = json.dumps(request_, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    for _ in range(2):
        packed, _digest = request_packed(request_)
        assert zlib.decompress(packed).decode() == canonical
