"""Small server-rendered SVG charts for the admin: no JavaScript library needed.

Only numbers and escaped text go into the markup."""

from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

WIDTH, HEIGHT, PAD = 560, 160, 28


def drift_and_tokens(turns) -> str:
    """Bars: tokens per turn; line: drift score (0-100) per turn; oldest on the left."""
    turns = list(turns)
    if not turns:
        return "No turns yet."
    n = len(turns)
    step = (WIDTH - 2 * PAD) / n
    top_tokens = max((t.total_tokens for t in turns), default=0) or 1
    plot_h = HEIGHT - 2 * PAD
    bars, points, labels = [], [], []
    for i, turn in enumerate(turns):
        x = PAD + i * step
        h = plot_h * turn.total_tokens / top_tokens
        bars.append(
            format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" fill="#c9d8f5">'
                "<title>turn {}: {} tokens</title></rect>",
                f"{x + step * 0.15:.1f}",
                f"{HEIGHT - PAD - h:.1f}",
                f"{step * 0.7:.1f}",
                f"{h:.1f}",
                turn.number,
                turn.total_tokens,
            )
        )
        if turn.drift_score is not None:
            y = HEIGHT - PAD - plot_h * turn.drift_score / 100
            points.append(f"{x + step / 2:.1f},{y:.1f}")
    line = (
        format_html(
            '<polyline points="{}" fill="none" stroke="#d9480f" stroke-width="2"/>',
            " ".join(points),
        )
        if points
        else ""
    )
    labels.append(
        format_html(
            '<text x="{}" y="{}" font-size="11" fill="#555">max {} tokens · drift 0-100 '
            "(line) · last {} turns</text>",
            PAD,
            PAD - 10,
            top_tokens,
            n,
        )
    )
    return mark_safe(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape("drift score and tokens per turn")}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff" stroke="#ddd"/>'
        + "".join(bars)
        + line
        + "".join(labels)
        + "</svg>"
    )
