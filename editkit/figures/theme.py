"""What every editkit figure keeps to so that a student can read it, and the helpers that place things accordingly.

`readability.problems(fig, width)` checks a figure against these rules (tests/test_figure_readability.py runs it on
every figure function at the width the pages give it).
"""
from __future__ import annotations

MIN_FONT = 11  # px: the smallest text a figure may show (ticks, legends, annotations, labels inside cells)
LEGEND_FONT = 12
TITLE_FONT = 14
# the width in px a chart gets on a page of the app at a 1400 px wide window (wide layout, sidebar open):
# the main column, and the columns the pages split it into
WIDTHS = {"full": 960, "three_quarters": 710, "two_thirds": 630, "half": 470, "third": 300}
# what plotly draws without being told (plotly.js defaults), which the check and the helpers assume
DEFAULT_FONT = 12
DEFAULT_TITLE_FONT = 17
DEFAULT_MARGIN = {"l": 80, "r": 80, "t": 100, "b": 80}
DEFAULT_HEIGHT = 450
AXIS_BAND = 50  # px below a plot taken by the x axis's tick labels and its title
# Plotly's toolbar, shown over a chart's top-right corner on hover (Streamlit adds a fullscreen button to it):
# 28 px per button, 30 px high. Its eight buttons covered the titles of the charts half a page wide or less
# on hover; every editkit figure keeps the PNG download, the reset of the axes and the fullscreen button
# (dragging still zooms). readability.toolbar_box places it; a title or label under it is a defect.
TOOLBAR_REMOVE = ("zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale", "resetscale")
TOOLBAR_BUTTONS = 8  # plotly's toolbar on a 2-D chart in Streamlit, before any is removed
TOOLBAR_BUTTON, TOOLBAR_HEIGHT = 28, 30


def figure(*args, **kwargs):
    """A plotly figure as every editkit figure starts: go.Figure(*args, **kwargs) with the short toolbar."""
    import plotly.graph_objects as go

    return short_toolbar(go.Figure(*args, **kwargs))


def subplots(*args, **kwargs):
    """plotly's make_subplots(*args, **kwargs) with the short toolbar."""
    from plotly.subplots import make_subplots

    return short_toolbar(make_subplots(*args, **kwargs))


def short_toolbar(fig):
    """The toolbar's PNG download and Streamlit's fullscreen button only, and the title (whatever its length and
    the chart's width) under the toolbar's band: its top TOOLBAR_HEIGHT px from the figure's top, the top margin
    grown to hold it (plotly's title.automargin). A figure sets its title's text and font afterwards."""
    fig.update_layout(modebar={"remove": list(TOOLBAR_REMOVE)},
                      title={"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": TOOLBAR_HEIGHT + 2},
                             "automargin": True})
    return fig


def text_width(text: str, size: float) -> float:
    """The width in px of one line of text at font size `size` (sans-serif, estimated per character)."""
    import re

    text = re.sub(r"<[^>]+>", "", str(text))  # plotly's <b>, <br> and <sup> tags take no room of their own
    w = 0.0
    for c in text:
        w += 0.3 if c in "il.,:;'|!()[]" else 0.72 if c in "MWmw@%" else 0.62 if c.isupper() else \
            0.56 if c.isdigit() else 1.0 if ord(c) > 0x2e80 else 0.52
    return w * size


def wrap(text: str, width: float, size: float) -> str:
    """`text` broken at spaces into lines (joined by plotly's <br>) of at most `width` px at font size `size`; a
    single word wider than that keeps a line of its own."""
    lines: list[str] = []
    for word in str(text).split():
        if lines and text_width(lines[-1] + " " + word, size) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def margins(fig) -> dict:
    m = fig.layout.margin
    return {k: (getattr(m, k) if getattr(m, k) is not None else v) for k, v in DEFAULT_MARGIN.items()}


def legend_below(fig, font: int = LEGEND_FONT, width: int | None = None) -> None:
    """A horizontal legend under the plot, below the x axis's labels and title (never under the figure's title
    or over the plot), with the bottom margin grown to hold its rows at `width` (default: the full page)."""
    height = fig.layout.height or DEFAULT_HEIGHT
    m = margins(fig)
    names = [t.name for t in fig.data if t.name and t.showlegend is not False]
    rows = legend_rows(names, font, (width or WIDTHS["full"]) - m["l"])  # it starts at the plot's left edge
    need = AXIS_BAND + rows * (font + 10) + 10
    if m["b"] < need:  # the plot keeps its height: the figure grows by what the legend needs
        fig.update_layout(height=height + need - m["b"], margin={"b": need})
    # at the figure's bottom (container coordinates), so a top margin plotly grows for the title (short_toolbar)
    # moves nothing under the plot: in the plot's coordinates the legend rode up onto the x axis's title
    fig.update_layout(legend={"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 0,
                              "yanchor": "bottom", "font": {"size": font}})


def legend_rows(names: list[str], font: float, width: float) -> int:
    """How many rows a horizontal legend of `names` takes in a figure `width` px wide."""
    rows, used = 1, 0.0
    for name in names:
        item = text_width(name, font) + 45  # the symbol and the gap after the text
        if used and used + item > width:
            rows, used = rows + 1, 0.0
        used += item
    return rows
