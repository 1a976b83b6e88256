"""A model call's request as kept with its step (teams.requests)."""

import pytest

from teams.requests import request_digest, request_pack, request_packed, request_unpack

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
