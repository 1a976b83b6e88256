"""The pages' wording (teams/web/presentation.py): a long text shortened at a word."""

from teams.web.presentation import shortened


def test_a_text_that_fits_is_whole():
    assert shortened("What is the riskiest part?", 300) == "What is the riskiest part?"


def test_a_long_text_is_cut_after_a_whole_word_never_mid_word():
    ask = "What is the riskiest part of the plan? " * 10  # 390 characters
    shown = shortened(ask, 300)
    assert len(shown) <= 300 and shown.endswith("…")
    assert ask.startswith(shown[:-1]) and ask[len(shown) - 1] == " "  # a word ends there
    assert shortened("one two three four", 10) == "one two…"
    assert shortened("one two three four", 8) == "one two…"  # the cut falls between words


def test_one_word_longer_than_the_limit_is_cut_where_it_must_be():
    assert shortened("x" * 20, 10) == "x" * 9 + "…"
    assert shortened("ab " + "x" * 20, 10) == "ab " + "x" * 6 + "…"  # no word end late enough
