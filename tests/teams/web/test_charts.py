"""The admin's drift and token chart: axes, ticks, a legend and only escaped text."""

import re
from types import SimpleNamespace

from teams.web.charts import PLOT_H, TOP, drift_and_tokens, input_tokens, nice_top, tokens_by_agent

X_LABEL_Y = f"{TOP + PLOT_H + 15:.1f}"


def turn(number, tokens=0, drift=None, cache_read=0, cache_write=0):
    return SimpleNamespace(
        number=number,
        input_tokens=tokens,
        cache_read_tokens=cache_read,
        cache_creation_tokens=cache_write,
        drift_score=drift,
    )


def texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_no_turns_no_chart():
    assert drift_and_tokens([]) == "No turns yet."


def test_axes_ticks_and_labels():
    svg = drift_and_tokens(
        [turn(7, 1000, 90), turn(8, 2500, 70, cache_read=1200), turn(9, 800, 35)]
    )
    labels = texts(svg)
    # Left: drift score 0-100; right: input tokens per turn; bottom: turn numbers.
    assert {"0", "25", "50", "75", "100", "drift score"} <= set(labels)
    assert {"1,000", "2,000", "3,000", "4,000", "input tokens"} <= set(labels)
    assert {"7", "8", "9", "turn"} <= set(labels)
    assert 'transform="rotate(-90' in svg and 'transform="rotate(90' in svg
    # A legend says what the bars and the line are.
    assert "input tokens per turn (with cache reads and writes)" in labels
    assert "drift score (0-100)" in labels
    # Bars count input tokens with cache reads and writes, not output tokens.
    assert "turn 8: 3700 input tokens" in svg
    assert svg.count('class="bar"') == 3 and svg.count('class="point"') == 3
    assert "<polyline" in svg and "turn 9: drift 35" in svg


def test_turns_without_a_score_make_no_point():
    svg = drift_and_tokens([turn(1, 10, 100), turn(2, 10, None), turn(3, 10, 80)])
    assert svg.count('class="point"') == 2
    assert "<polyline" not in drift_and_tokens([turn(1, 10, None)])


def test_many_turns_name_every_few_on_the_x_axis():
    svg = drift_and_tokens([turn(n, n * 10, 100 - n) for n in range(1, 41)])
    x_labels = [int(n) for n in re.findall(rf'<text x="[\d.]+" y="{X_LABEL_Y}"[^>]*>(\d+)<', svg)]
    assert x_labels == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 40]


def test_nice_tops():
    assert nice_top(0) == (4, 1)
    assert nice_top(3) == (4, 1)
    assert nice_top(99) == (100, 20)
    assert nice_top(1234) == (1250, 250)
    assert nice_top(3700) == (4000, 1000)
    assert nice_top(45_000) == (50_000, 10_000)
    top, step = nice_top(777_777)
    assert top >= 777_777 and top % step == 0 and top // step == 4


def test_input_tokens_of_a_turn():
    assert input_tokens(turn(1, 100, cache_read=1000, cache_write=50)) == 1150


def test_only_numbers_and_escaped_text():
    svg = drift_and_tokens([turn("<script>alert(1)</script>", 5, 50)])
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_the_chart_fits_its_column():
    svg = drift_and_tokens([turn(1, 10, 100)])
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" width="640" height="250"')
    assert 'viewBox="0 0 640 250" style="max-width:100%;height:auto"' in svg
    assert 'aria-label="drift score and input tokens over the last 1 turns"' in svg


def agent_turn(number, agent, tokens):
    return SimpleNamespace(**vars(turn(number, tokens)), agent=SimpleNamespace(name=agent))


def test_the_teams_chart_draws_a_line_per_agent_with_a_legend():
    turns = [agent_turn(n, ["coach", "coder", "<b>x</b>"][n % 3], 1000 * n) for n in range(1, 10)]
    svg = str(tokens_by_agent(turns))
    lines = re.findall(r'<polyline class="agent-line" points="([^"]*)"', svg)
    assert len(lines) == 3 and all(len(points.split()) == 3 for points in lines)
    assert {"coach", "coder", "&lt;b&gt;x&lt;/b&gt;"} <= set(texts(svg))
    assert "<b>" not in svg
    # The y axis reaches the largest input (9,000 tokens); x names the first and last turns.
    assert "10,000" in texts(svg) and {"1", "9"} <= set(texts(svg))
    assert "coder, turn 4: 4000 input tokens" in svg
    assert tokens_by_agent([]) == "No turns yet."
