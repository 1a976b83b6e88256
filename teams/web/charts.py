"""Small server-rendered SVG charts for the admin: no JavaScript library needed.

Only numbers and escaped text go into the markup."""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

WIDTH, HEIGHT = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 56, 70, 34, 44  # room for the axes, their labels and the legend
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
BAR, LINE, AXIS, GRID, INK = "#c9d8f5", "#d9480f", "#888", "#eee", "#555"
DRIFT_TICKS = (0, 25, 50, 75, 100)
MAX_X_LABELS = 10


def input_tokens(turn) -> int:
    """What the model read on a turn: its input, cache reads and cache writes."""
    return turn.input_tokens + turn.cache_read_tokens + turn.cache_creation_tokens


def nice_step(value: float) -> int:
    """The smallest of 1, 2, 2.5 and 5 times a power of ten that is at least `value`
    (a whole number: 1 at least)."""
    magnitude = 1
    while magnitude * 10 < value:
        magnitude *= 10
    for unit in (1, 2, 2.5, 5, 10):
        step = unit * magnitude
        if step >= value and step == int(step):
            return int(step)
    return magnitude * 10  # pragma: no cover - unit 10 always fits


def nice_top(value: int) -> tuple[int, int]:
    """A round top for an axis reaching `value`, and its tick step: 4 or 5 steps,
    whichever ends lower."""
    value = max(value, 1)
    return min((nice_step(value / n) * n, nice_step(value / n)) for n in (4, 5))


def _text(x, y, text, anchor="middle", extra=""):
    return format_html(
        '<text x="{}" y="{}" text-anchor="{}" font-size="11" fill="{}"{}>{}</text>',
        f"{x:.1f}",
        f"{y:.1f}",
        anchor,
        INK,
        mark_safe(extra),
        text,
    )


def _line(x1, y1, x2, y2, color):
    return format_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}"/>',
        f"{x1:.1f}",
        f"{y1:.1f}",
        f"{x2:.1f}",
        f"{y2:.1f}",
        color,
    )


def _svg(parts: list, label: str) -> str:
    """The chart: its parts (already escaped markup) in an SVG that scales down."""
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" role="img" aria-label="{}">{}</svg>',
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        label,
        mark_safe("".join(parts)),
    )


def drift_and_tokens(turns) -> str:
    """Bars: input tokens per turn (right axis); line: the drift score after each turn
    (left axis, 0-100); x: the turns' numbers, oldest on the left."""
    turns = list(turns)
    if not turns:
        return "No turns yet."
    top_tokens, token_step = nice_top(max(input_tokens(t) for t in turns))
    parts = [format_html('<rect width="{}" height="{}" fill="#fff" stroke="#ddd"/>', WIDTH, HEIGHT)]
    parts += _drift_axis()
    parts += _tokens_axis(top_tokens, token_step)
    parts += _bars_and_drift(turns, top_tokens)
    parts += _drift_legend()
    return _svg(parts, f"drift score and input tokens over the last {len(turns)} turns")


def _rotated_label(x: float, text: str, degrees: int) -> str:
    y = TOP + PLOT_H / 2
    return _text(x, y, text, extra=f' transform="rotate({degrees} {x} {y:.1f})"')


def _drift_axis() -> list:
    """The left axis: the drift score, with grid lines at its ticks."""
    bottom, parts = TOP + PLOT_H, []
    for tick in DRIFT_TICKS:
        y = bottom - PLOT_H * tick / 100
        parts.append(_line(LEFT, y, LEFT + PLOT_W, y, GRID))
        parts.append(_line(LEFT - 4, y, LEFT, y, AXIS))
        parts.append(_text(LEFT - 7, y + 4, tick, anchor="end"))
    parts.append(_line(LEFT, TOP, LEFT, bottom, AXIS))
    parts.append(_rotated_label(14, "drift score", -90))
    return parts


def _tokens_axis(top_tokens: int, token_step: int) -> list:
    """The right axis: input tokens per turn."""
    bottom, right, parts = TOP + PLOT_H, LEFT + PLOT_W, []
    for tick in range(0, top_tokens + 1, token_step):
        y = bottom - PLOT_H * tick / top_tokens
        parts.append(_line(right, y, right + 4, y, AXIS))
        parts.append(_text(right + 7, y + 4, f"{tick:,}", anchor="start"))
    parts.append(_line(right, TOP, right, bottom, AXIS))
    parts.append(_rotated_label(WIDTH - 10, "input tokens", 90))
    return parts


def _bars_and_drift(turns: list, top_tokens: int) -> list:
    """Bars and the line, turn by turn; the x axis names every few turns."""
    n, bottom, parts = len(turns), TOP + PLOT_H, []
    step = PLOT_W / n
    points, every = [], max(1, -(-n // MAX_X_LABELS))
    for i, turn in enumerate(turns):
        x = LEFT + i * step
        tokens = input_tokens(turn)
        h = PLOT_H * tokens / top_tokens
        parts.append(
            format_html(
                '<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="{}">'
                "<title>turn {}: {} input tokens</title></rect>",
                f"{x + step * 0.15:.1f}",
                f"{bottom - h:.1f}",
                f"{step * 0.7:.1f}",
                f"{h:.1f}",
                BAR,
                turn.number,
                tokens,
            )
        )
        if turn.drift_score is not None:
            points.append((x + step / 2, bottom - PLOT_H * turn.drift_score / 100, turn))
        if i % every == 0 or i == n - 1:
            parts.append(_line(x + step / 2, bottom, x + step / 2, bottom + 4, AXIS))
            parts.append(_text(x + step / 2, bottom + 15, turn.number))
    parts.append(_line(LEFT, bottom, LEFT + PLOT_W, bottom, AXIS))
    parts.append(_text(LEFT + PLOT_W / 2, HEIGHT - 8, "turn"))
    return parts + _drift_line(points)


def _drift_line(points: list) -> list:
    if not points:
        return []
    return [
        format_html(
            '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>',
            " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points),
            LINE,
        ),
        format_html_join(
            "",
            '<circle class="point" cx="{}" cy="{}" r="2.5" fill="{}">'
            "<title>turn {}: drift {}</title></circle>",
            (
                (f"{x:.1f}", f"{y:.1f}", LINE, turn.number, turn.drift_score)
                for x, y, turn in points
            ),
        ),
    ]


def _drift_legend() -> list:
    """The legend, above the plot."""
    legend_x = LEFT + 330
    return [
        format_html('<rect x="{}" y="10" width="12" height="10" fill="{}"/>', LEFT, BAR),
        _text(LEFT + 17, 19, "input tokens per turn (with cache reads and writes)", "start"),
        format_html(
            '<line x1="{}" y1="15" x2="{}" y2="15" stroke="{}" stroke-width="2"/>',
            legend_x,
            legend_x + 14,
            LINE,
        ),
        _text(legend_x + 19, 19, "drift score (0-100)", "start"),
    ]


AGENT_COLORS = ("#1c7ed6", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c")


def tokens_by_agent(turns) -> str:
    """One line per agent: the input tokens (cache reads and writes included) of each of
    its turns, at the team's turn number; oldest on the left."""
    turns = [t for t in turns if t.number]
    if not turns:
        return "No turns yet."
    first, last = min(t.number for t in turns), max(t.number for t in turns)
    span = max(last - first, 1)
    bottom, right = TOP + PLOT_H, LEFT + PLOT_W
    top_tokens, token_step = nice_top(max(input_tokens(t) for t in turns))

    def at(turn):
        return (
            LEFT + PLOT_W * (turn.number - first) / span,
            bottom - PLOT_H * input_tokens(turn) / top_tokens,
        )

    parts = [format_html('<rect width="{}" height="{}" fill="#fff" stroke="#ddd"/>', WIDTH, HEIGHT)]
    for tick in range(0, top_tokens + 1, token_step):
        y = bottom - PLOT_H * tick / top_tokens
        parts.append(_line(LEFT, y, right, y, GRID))
        parts.append(_text(LEFT - 7, y + 4, f"{tick:,}", anchor="end"))
    parts.append(_line(LEFT, TOP, LEFT, bottom, AXIS))
    parts.append(_line(LEFT, bottom, right, bottom, AXIS))
    for number in sorted({first, last, first + span // 2}):
        x = LEFT + PLOT_W * (number - first) / span
        parts.append(_line(x, bottom, x, bottom + 4, AXIS))
        parts.append(_text(x, bottom + 15, number))
    parts.append(_text(LEFT + PLOT_W / 2, HEIGHT - 8, "turn"))

    by_agent: dict[str, list] = {}
    for turn in sorted(turns, key=lambda t: t.number):
        by_agent.setdefault(turn.agent.name, []).append(turn)
    parts += _agent_lines(by_agent, at)
    return _svg(parts, f"input tokens per turn of each agent over turns {first} to {last}")


def _agent_lines(by_agent: dict[str, list], at) -> list:
    """Each agent's line, its points and its legend entry; `at(turn)` places a point."""
    parts, legend_x = [], LEFT
    for i, (name, own) in enumerate(by_agent.items()):
        color = AGENT_COLORS[i % len(AGENT_COLORS)]
        parts.append(
            format_html(
                '<polyline class="agent-line" points="{}" fill="none" stroke="{}" '
                'stroke-width="1.5"><title>{}</title></polyline>',
                " ".join("{:.1f},{:.1f}".format(*at(t)) for t in own),
                color,
                name,
            )
        )
        parts.append(
            format_html_join(
                "",
                '<circle cx="{}" cy="{}" r="2" fill="{}"><title>{}, turn {}: {} input tokens'
                "</title></circle>",
                (
                    (f"{at(t)[0]:.1f}", f"{at(t)[1]:.1f}", color, name, t.number, input_tokens(t))
                    for t in own
                ),
            )
        )
        parts.append(
            format_html(
                '<line x1="{}" y1="15" x2="{}" y2="15" stroke="{}" stroke-width="2"/>',
                legend_x,
                legend_x + 14,
                color,
            )
        )
        parts.append(_text(legend_x + 19, 19, name, "start"))
        legend_x += 30 + 7 * len(name)
    return parts
