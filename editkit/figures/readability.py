# Over 450 lines: one check per way a figure can be unreadable, against plotly.js's layout defaults.
"""Is a figure readable at the width a page gives it? `problems(fig, width)` lays the figure out on paper, from its
layout alone (plotly.js's defaults where the figure sets nothing, text widths estimated from the font size), and
names what a student could not read: a legend under the title or over another label, annotations that collide,
text smaller than theme.MIN_FONT (also inside heatmap cells, where plotly shrinks text to fit), a title wider
than the figure, categories on a numeric axis (ticks at 0.5), a legend that crowds out the plot.

Geometry is in px from the figure's top-left corner. The estimate errs on the side of a problem: a figure that
passes has room to spare in the browser.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .theme import (
    DEFAULT_FONT,
    DEFAULT_HEIGHT,
    DEFAULT_TITLE_FONT,
    MIN_FONT,
    TOOLBAR_BUTTON,
    TOOLBAR_BUTTONS,
    TOOLBAR_HEIGHT,
    TOOLBAR_REMOVE,
    margins,
    text_width,
)

TITLE_GAP = 22  # px plotly leaves between a title it pushed the margin for and the plot (measured in Chromium)
NUMBERISH = re.compile(r"^['\"%,$#\s]*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?['\"%,$#\s]*$")  # plotly.js's cleanNumber


@dataclass
class Box:
    what: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box", slack: float = 1.0) -> bool:
        return (min(self.x1, other.x1) - max(self.x0, other.x0) > slack
                and min(self.y1, other.y1) - max(self.y0, other.y0) > slack)


def _size(font, default: float) -> float:
    return (font.size if font is not None and font.size is not None else None) or default


class Page:
    """The figure laid out at `width` px: the plot area, axis domains in px and data ranges per axis."""

    def __init__(self, fig, width: float):
        self.fig = fig
        self.W = float(fig.layout.width or width)
        self.H = float(fig.layout.height or DEFAULT_HEIGHT)
        m = margins(fig)
        self.l, self.r, self.t, self.b = m["l"], m["r"], m["t"], m["b"]
        self.base = _size(fig.layout.font, DEFAULT_FONT)
        title = title_box(self)
        if title is not None and fig.layout.title.automargin:  # plotly grows the top margin to hold the title
            self.t = max(self.t, title.y1 + TITLE_GAP)
        self.ranges = self._ranges()

    # paper fractions -> px
    def px(self, fx: float) -> float:
        return self.l + fx * (self.W - self.l - self.r)

    def py(self, fy: float) -> float:
        return self.t + (1 - fy) * (self.H - self.t - self.b)

    def axis(self, name: str):
        """'x', 'x2', 'y3' -> the layout axis object (xaxis, xaxis2, ...)."""
        return self.fig.layout[name[0] + "axis" + name[1:]]

    def domain(self, name: str) -> tuple[float, float]:
        d = self.axis(name).domain
        return (d[0], d[1]) if d else (0.0, 1.0)

    def _ranges(self) -> dict:
        """Each axis's data range (what plotly's autorange would roughly show), and whether it is categorical."""
        values: dict = {}
        for tr in self.fig.data:
            xa, ya = getattr(tr, "xaxis", None) or "x", getattr(tr, "yaxis", None) or "y"
            for ax, key in ((xa, "x"), (ya, "y")):
                vals = getattr(tr, key, None)
                if vals is None and tr.type == "heatmap" and tr.z is not None:
                    n = len(tr.z[0]) if key == "x" else len(tr.z)
                    vals = list(range(n))
                if vals is None:
                    continue
                values.setdefault(ax, []).extend(list(vals))
        out = {}
        for ax, vals in values.items():
            layout_axis = self.axis(ax)
            category = layout_axis.type == "category" or any(isinstance(v, str) and not NUMBERISH.match(v)
                                                               for v in vals)
            if layout_axis.range is not None:
                lo, hi = layout_axis.range
            elif category:
                n = len(dict.fromkeys(vals))
                lo, hi = -0.5, n - 0.5
            else:
                nums = [float(NUMBERISH.match(v) and re.sub(r"[^0-9eE.+-]", "", v) or "nan")
                        if isinstance(v, str) else v for v in vals if v is not None]
                nums = [v for v in nums if isinstance(v, (int, float)) and math.isfinite(v)]
                if layout_axis.type == "log":
                    nums = [math.log10(v) for v in nums if v > 0]
                lo, hi = (min(nums), max(nums)) if nums else (0.0, 1.0)
                if any(tr.type == "heatmap" for tr in self.fig.data):
                    lo, hi = lo - 0.5, hi + 0.5
            out[ax] = (float(lo), float(hi) if hi != lo else float(lo) + 1.0, category)
        return out

    def data_x(self, ax: str, value) -> float:
        lo, hi, category = self.ranges.get(ax, (0.0, 1.0, False))
        if category and isinstance(value, str):
            return self.px(self.domain(ax)[0])  # a category's position is not known here: its axis start
        if self.axis(ax).type == "log" and value and value > 0:
            value = math.log10(value)
        d0, d1 = self.domain(ax)
        return self.px(d0 + (d1 - d0) * (float(value) - lo) / (hi - lo))

    def data_y(self, ax: str, value) -> float:
        lo, hi, category = self.ranges.get(ax, (0.0, 1.0, False))
        if category and isinstance(value, str):
            return self.py(self.domain(ax)[0])
        if self.axis(ax).type == "log" and value and value > 0:
            value = math.log10(value)
        d0, d1 = self.domain(ax)
        frac = (float(value) - lo) / (hi - lo)
        if self.axis(ax).autorange == "reversed":
            frac = 1 - frac
        return self.py(d0 + (d1 - d0) * frac)

    def ref_x(self, ref: str, value) -> float:
        if ref in (None, "paper"):
            return self.px(value)
        if ref == "container":
            return value * self.W
        if ref.endswith(" domain"):
            d0, d1 = self.domain(ref.split()[0])
            return self.px(d0 + (d1 - d0) * value)
        return self.data_x(ref, value)

    def ref_y(self, ref: str, value) -> float:
        if ref in (None, "paper"):
            return self.py(value)
        if ref == "container":
            return (1 - value) * self.H
        if ref.endswith(" domain"):
            d0, d1 = self.domain(ref.split()[0])
            return self.py(d0 + (d1 - d0) * value)
        return self.data_y(ref, value)


def _anchored(x: float, y: float, w: float, h: float, xanchor: str, yanchor: str, what: str) -> Box:
    x0 = x - w / 2 if xanchor in ("center", "auto", None) else x - w if xanchor == "right" else x
    y0 = y - h / 2 if yanchor in ("middle", "auto", None) else y - h if yanchor == "bottom" else y
    return Box(what, x0, y0, x0 + w, y0 + h)


def _lines(text: str) -> list[str]:
    return re.split(r"<br\s*/?>", str(text or "")) or [""]


def _text_box(text: str, size: float) -> tuple[float, float]:
    lines = _lines(text)
    return max(text_width(l, size) for l in lines), len(lines) * size * 1.25


def title_box(p: Page) -> Box | None:
    t = p.fig.layout.title
    if t is None or not t.text:
        return None
    size = _size(t.font, DEFAULT_TITLE_FONT)
    w, h = _text_box(t.text, size)
    x = t.x if t.x is not None else 0.05
    xref = t.xref or "container"
    xpx = x * p.W if xref == "container" else p.px(x)
    xanchor = t.xanchor if t.xanchor not in (None, "auto") else ("left" if x < 1 / 3 else "right" if x > 2 / 3
                                                                 else "center")
    if t.y is None or t.y == "auto":
        ypx, yanchor = p.t / 2, "middle"  # plotly: the middle of the top margin
    else:
        ypx = (1 - t.y) * p.H if (t.yref or "container") == "container" else p.py(t.y)
        yanchor = t.yanchor if t.yanchor not in (None, "auto") else "top"
        pad = t.pad.t or 0 if t.pad is not None else 0
        ypx += pad if yanchor == "top" else 0
    return _anchored(xpx, ypx, w, h, xanchor, yanchor, f"title {str(t.text)[:40]!r}")


def toolbar_box(p: Page) -> Box:
    """Where plotly's toolbar covers the figure on hover: its top-right corner, 28 px per button kept
    (theme.TOOLBAR_*; a figure that does not shorten it keeps all eight)."""
    removed = set(p.fig.layout.modebar.remove or ()) & set(TOOLBAR_REMOVE)
    buttons = TOOLBAR_BUTTONS - len(removed - {"select", "lasso"})  # shown on a scatter with selection only
    return Box("the toolbar (shown on hover)", p.W - buttons * TOOLBAR_BUTTON, 0, p.W, TOOLBAR_HEIGHT)


def legend_items(fig) -> list[str]:
    names, seen = [], set()
    for tr in fig.data:
        if tr.type in ("heatmap", "contour", "histogram2d"):
            continue
        show = tr.showlegend
        if show is False or not tr.name:
            continue
        group = tr.legendgroup
        if group and group in seen and show is not True:
            continue
        seen.add(group)
        names.append(tr.name)
    shown = fig.layout.showlegend
    if shown is False or (shown is None and len(names) < 2 and not any(t.showlegend for t in fig.data)):
        return []
    return names


def legend_box(p: Page) -> Box | None:
    names = legend_items(p.fig)
    if not names:
        return None
    lg = p.fig.layout.legend
    size = _size(lg.font, p.base)
    row_h = size + 10
    if lg.orientation == "h":
        x = lg.x if lg.x is not None else 0.0
        y = lg.y if lg.y is not None else -0.1
        avail = p.W - p.px(x)
        rows, used, widest = 1, 0.0, 0.0
        for name in names:
            item = text_width(name, size) + 45
            if used and used + item > avail:
                rows, used = rows + 1, 0.0
            used += item
            widest = max(widest, used)
        w, h = widest, rows * row_h
        yanchor = lg.yanchor or "top"  # plotly.js: a horizontal legend hangs from its y unless told otherwise
    else:
        x = lg.x if lg.x is not None else 1.02
        y = lg.y if lg.y is not None else 1.0
        w = max(text_width(n, size) for n in names) + 45
        h = len(names) * row_h
        yanchor = lg.yanchor or "auto"
    xanchor = lg.xanchor or "left"
    if xanchor == "auto":
        xanchor = "left" if x <= 1 / 3 else "right" if x >= 2 / 3 else "center"
    if yanchor == "auto":
        yanchor = "bottom" if y <= 1 / 3 else "top" if y >= 2 / 3 else "middle"
    ypx = (1 - y) * p.H if lg.yref == "container" else p.py(y)
    return _anchored(p.px(x), ypx, w, h, xanchor, yanchor, "legend")


def annotation_boxes(p: Page) -> list[Box]:
    out = []
    for a in p.fig.layout.annotations or ():
        if not a.text or a.visible is False:
            continue
        size = _size(a.font, p.base)
        w, h = _text_box(a.text, size)
        if a.textangle in (90, -90, 270):
            w, h = h, w
        x = p.ref_x(a.xref or "x", a.x if a.x is not None else 0)
        y = p.ref_y(a.yref or "y", a.y if a.y is not None else 0)
        if a.showarrow is not False:  # drawn at the end of an arrow above the point
            y -= (a.ay if isinstance(a.ay, (int, float)) else 30) * -1 if a.ayref in (None, "pixel") else 0
        out.append(_anchored(x, y, w, h, a.xanchor or "center", a.yanchor or "middle",
                             f"label {re.sub('<[^>]+>', '', str(a.text))[:40]!r}"))
    return out


def axis_boxes(p: Page) -> list[Box]:
    """The band of each x axis's tick labels (under the plot, or above it for side="top": in the top margin, where
    the title is), and a bottom axis's title under them (where plotly draws them)."""
    out = []
    for name in p.ranges:
        if not name.startswith("x"):
            continue
        axis = p.axis(name)
        d0, d1 = p.domain(name)
        anchor = axis.anchor if axis.anchor not in (None, "free") else "y" + name[1:]
        e0, e1 = p.domain(anchor) if anchor in p.ranges else (0.0, 1.0)
        tick = _size(axis.tickfont, p.base)
        if axis.side == "top":
            if axis.showticklabels is not False:
                top = p.py(e1)
                out.append(Box(f"{name}'s tick labels", p.px(d0), top - 4 - tick_band(p, name), p.px(d1), top - 2))
            continue
        bottom = p.py(e0)
        if axis.showticklabels is not False:
            out.append(Box(f"{name}'s tick labels", p.px(d0), bottom + 2, p.px(d1), bottom + 4 + tick * 1.4))
        if axis.title is not None and axis.title.text:
            size = _size(axis.title.font, p.base + 2)
            w = text_width(axis.title.text, size)
            mid = p.px((d0 + d1) / 2)
            top = bottom + 14 + tick * 1.4  # plotly.js: a standoff of ~10 px under the labels
            out.append(Box(f"{name}'s title {str(axis.title.text)[:30]!r}", mid - w / 2, top, mid + w / 2,
                           top + size * 1.4))
    return out


def category_labels(p: Page, name: str) -> list[str]:
    return [str(v) for tr in p.fig.data for v in (getattr(tr, name[0], None) or ())
            if (getattr(tr, f"{name[0]}axis", None) or name[0]) == name]


def tick_band(p: Page, name: str) -> float:
    """The height in px of a category x axis's tick labels: their lines (<br>), or, where plotly turns labels too
    wide for their room (no tickangle set), the widest line at its 30 degrees."""
    axis = p.axis(name)
    size = _size(axis.tickfont, p.base)
    labels = category_labels(p, name) if p.ranges[name][2] else []
    if not labels:
        return size * 1.4
    boxes = [_text_box(v, size) for v in labels]
    widest, tall = max(w for w, _ in boxes), max(h for _, h in boxes)
    if widest > _room(p, name) and axis.tickangle is None:
        return widest * 0.5 + size * 1.25
    return tall


def _room(p: Page, name: str) -> float:
    lo, hi, _ = p.ranges[name]
    d0, d1 = p.domain(name)
    return (d1 - d0) * (p.W - p.l - p.r) / max(round(hi - lo), 1)


def font_sizes(fig) -> list[tuple[str, float]]:
    """Every font size the figure sets explicitly, with where."""
    lay = fig.layout
    out = []

    def add(where, font):
        if font is not None and font.size is not None:
            out.append((where, font.size))

    add("the base font", lay.font)
    add("the title", lay.title.font if lay.title else None)
    add("the legend", lay.legend.font if lay.legend else None)
    for name in [k for k in lay.to_plotly_json() if re.match(r"^[xy]axis\d*$", k)]:
        axis = lay[name]
        add(f"{name}'s tick labels", axis.tickfont)
        if axis.title is not None:
            add(f"{name}'s title", axis.title.font)
    for a in lay.annotations or ():
        add(f"label {str(a.text)[:30]!r}", a.font)
    for tr in fig.data:
        add(f"the text of {tr.name or tr.type}", getattr(tr, "textfont", None))
        bar = getattr(tr, "colorbar", None)
        if bar is not None:
            add("a colour bar's ticks", bar.tickfont)
    return out


def cell_text(p: Page) -> list[str]:
    """Heatmaps with text in their cells: the size the text gets (plotly shrinks it to fit a cell unless a size is
    set; a set size that does not fit overflows into the next cell)."""
    out = []
    for tr in p.fig.data:
        if tr.type != "heatmap" or tr.text is None or not (tr.texttemplate or tr.text):
            continue
        z = tr.z
        n_rows, n_cols = len(z), len(z[0])
        xa, ya = tr.xaxis or "x", tr.yaxis or "y"
        d0, d1 = p.domain(xa)
        e0, e1 = p.domain(ya)
        cell_w = (d1 - d0) * (p.W - p.l - p.r) / n_cols
        cell_h = (e1 - e0) * (p.H - p.t - p.b) / n_rows
        longest = max((str(t) for row in tr.text for t in row), key=lambda s: text_width(s, 1), default="")
        size = _size(tr.textfont, None) if tr.textfont is not None else None
        fits = min(cell_w / max(text_width(longest, 1), 1e-9), cell_h / 1.2) * 0.95
        if size is None and fits < MIN_FONT:
            out.append(f"heatmap cell text {longest!r} shrinks to {fits:.1f} px to fit a {cell_w:.0f} x "
                       f"{cell_h:.0f} px cell (below {MIN_FONT} px)")
        elif size is not None and size > fits * 1.05:
            out.append(f"heatmap cell text {longest!r} at {size} px overflows its {cell_w:.0f} x {cell_h:.0f} px "
                       "cell")
    return out


def numeric_categories(p: Page) -> list[str]:
    """Bars or points at labels such as '1', '2' or '#1' on an axis that is not categorical: plotly reads them as
    numbers and puts ticks between them (0.5, 1.5)."""
    out = []
    for tr in p.fig.data:
        if tr.type not in ("bar", "scatter"):
            continue
        for key in ("x", "y"):
            vals = getattr(tr, key, None)
            ax = getattr(tr, f"{key}axis", None) or key
            if vals is None or not len(vals) or p.axis(ax).type == "category":
                continue
            if all(isinstance(v, str) and NUMBERISH.match(v) for v in vals) and len(vals) < 12:
                out.append(f"{tr.name or tr.type}: the labels {list(vals)[:3]} on {ax} are read as numbers "
                           "(ticks fall between them); make the axis categorical")
                break
    return out


def category_crowding(p: Page) -> list[str]:
    """Category tick labels that cannot all be drawn: more labels than the axis has room for."""
    out = []
    for name, (lo, hi, category) in p.ranges.items():
        if not category:
            continue
        axis = p.axis(name)
        n = round(hi - lo)
        size = _size(axis.tickfont, p.base)
        d0, d1 = p.domain(name)
        if name.startswith("y"):
            room = (d1 - d0) * (p.H - p.t - p.b) / max(n, 1)
            if room < size * 1.1:
                out.append(f"{name}: {n} labels in {room:.0f} px each, less than their {size:.0f} px height")
        else:
            room = _room(p, name)
            widest = max((_text_box(v, size)[0] for v in category_labels(p, name)), default=0.0)
            if widest > room and axis.tickangle in (None, 0):  # none: plotly turns them; 0: drawn level, they touch
                out.append(f"{name}: labels up to {widest:.0f} px wide have {room:.0f} px each and collide")
    return out


def problems(fig, width: float) -> list[str]:
    """What keeps a student from reading `fig` when it is drawn `width` px wide (empty when nothing does)."""
    p = Page(fig, width)
    found = [f"{where}: {size:g} px text is below the minimum of {MIN_FONT} px" for where, size in font_sizes(fig)
             if size < MIN_FONT]
    title, legend = title_box(p), legend_box(p)
    labels = annotation_boxes(p)
    if title is not None and (title.x1 > p.W + 1 or title.x0 < -1):
        found.append(f"{title.what} is {title.x1 - title.x0:.0f} px wide in a {p.W:.0f} px figure: it is cut off")
    axes = axis_boxes(p)
    if legend is not None:
        if title is not None and legend.overlaps(title):
            found.append(f"the legend is drawn over {title.what}")
        if legend.x0 >= p.W - p.r - 1 and (legend.x1 - legend.x0) > 0.35 * p.W:
            found.append(f"the legend beside the plot is {legend.x1 - legend.x0:.0f} px wide: it crowds out a "
                         f"{p.W:.0f} px figure")
        for box in labels + axes:
            if legend.overlaps(box):
                found.append(f"the legend is drawn over {box.what}")
        if legend.overlaps(Box("plot", p.px(0), p.py(1), p.px(1), p.py(0)), slack=4):
            found.append("the legend is drawn over the plot")
    for box in axes:
        if title is not None and box.overlaps(title):
            found.append(f"{box.what} are drawn over {title.what}")
    toolbar = toolbar_box(p)
    for box in ([title] if title is not None else []) + labels:
        if toolbar.overlaps(box):
            found.append(f"{toolbar.what} covers {box.what}")
    for i, a in enumerate(labels):
        if title is not None and a.overlaps(title):
            found.append(f"{a.what} is drawn over {title.what}")
        for b in axes:
            if a.overlaps(b):
                found.append(f"{a.what} is drawn over {b.what}")
        for b in labels[i + 1:]:
            if a.overlaps(b):
                found.append(f"{a.what} and {b.what} collide")
    found += cell_text(p) + numeric_categories(p) + category_crowding(p)
    return list(dict.fromkeys(found))
