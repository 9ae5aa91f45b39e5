"""One self-contained HTML document of headings, sentences, tables and plotly figures: what a report is.

    doc = Document("Edit comparison", "Gemma 3 270M, 28 Nov 2026")
    doc.heading("Who did best"); doc.text("By the summed margin ..."); doc.table(rows)
    doc.figures([(fig, 300, "caption"), ...])     # side by side, each drawn `width` px wide
    html = doc.render()                              # plotly.js inline once: opens offline, prints

The page is a fixed 1,040 px column: at a 1,400 px browser window it sits in the middle with room around it,
and on A4 landscape (277 mm, about 1,047 px at 96 dpi) it prints at the same layout, so every figure keeps the
width it was drawn for (figures/theme.py: the readability check's widths). Figures are static (no mode bar) and
each starts on a fresh line where a page break would cut it. Nothing refers to the network: plotly.js is
inlined from the installed plotly package, styles are inline, and there are no fonts, images or links to fetch.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import plotly.graph_objects as go

PAGE = 1040  # px: the document's column (module docstring)
GAP = 16  # px between figures side by side

CSS = f"""
body {{ font-family: "DejaVu Sans", Arial, Helvetica, sans-serif; color: #222; background: #fff; margin: 0; }}
main {{ width: {PAGE}px; margin: 24px auto 48px; }}
h1 {{ font-size: 26px; margin: 0 0 4px; }}
h2 {{ font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }}
p, li {{ font-size: 14px; line-height: 1.45; }}
p.sub {{ color: #555; margin-top: 0; }}
p.conclusion {{ font-size: 15px; background: #f3f6fb; border-left: 4px solid #1f77b4; padding: 8px 12px; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 8px 0 4px; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.caption {{ font-size: 12px; color: #555; margin: 2px 0 12px; }}
.row {{ display: flex; gap: {GAP}px; align-items: flex-start; }}
.figure {{ break-inside: avoid; page-break-inside: avoid; }}
pre {{ background: #f6f6f6; border: 1px solid #ddd; padding: 8px 10px; font-size: 12px; white-space: pre-wrap;
       overflow-wrap: anywhere; }}
details summary {{ cursor: pointer; font-size: 14px; }}
@page {{ size: A4 landscape; margin: 8mm; }}
@media print {{
  main {{ margin: 0 auto; }}
  h2 {{ break-after: avoid; page-break-after: avoid; }}
  table, pre, p.conclusion {{ break-inside: avoid; page-break-inside: avoid; }}
  details > *:not(summary) {{ display: block; }}
}}
"""


@dataclass
class Document:
    """A report's parts in order (module docstring); `render()` writes the HTML."""

    title: str
    subtitle: str = ""
    parts: list[str] = field(default_factory=list)
    drawn: list[tuple[go.Figure, int]] = field(default_factory=list)  # every figure and its width, in order

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def text(self, text: str, kind: str = "") -> None:
        """A paragraph of plain text; kind "conclusion" sets it off as a result, "caption" as a small note."""
        tag = f' class="{kind}"' if kind else ""
        self.parts.append(f"<p{tag}>{html.escape(text)}</p>")

    def items(self, lines: list[str]) -> None:
        self.parts.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")

    def table(self, rows: list[dict], caption: str = "") -> None:
        """Rows of {column: value} (every row the first row's columns); numbers right-aligned."""
        if not rows:
            return
        cols = list(rows[0])
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(_cell(r.get(c)) for c in cols) + "</tr>" for r in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        if caption:
            self.text(caption, "caption")

    def code(self, text: str) -> None:
        self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def details(self, summary: str, text: str) -> None:
        """Text folded away on screen (opened for print): long JSON a reader copies rather than reads."""
        self.parts.append(f"<details><summary>{html.escape(summary)}</summary><pre>{html.escape(text)}</pre>"
                          "</details>")

    def figures(self, figs: list[tuple[go.Figure, int, str]]) -> None:
        """Figures side by side, each (figure, width in px, caption); their widths with the gaps fit PAGE."""
        cells = []
        for fig, width, caption in figs:
            self.drawn.append((fig, width))
            cells.append(f'<div class="figure" style="width:{width}px">{_plot(fig, width, len(self.drawn))}'
                         + (f'<p class="caption">{html.escape(caption)}</p>' if caption else "") + "</div>")
        self.parts.append('<div class="row">' + "".join(cells) + "</div>")

    def render(self) -> str:
        from plotly.offline import get_plotlyjs

        script = f"<script>{get_plotlyjs()}</script>" if self.drawn else ""
        sub = f'<p class="sub">{html.escape(self.subtitle)}</p>' if self.subtitle else ""
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta name=\"viewport\" content=\"width={PAGE + 48}\"><title>{html.escape(self.title)}</title>"
                f"<style>{CSS}</style>{script}</head><body><main><h1>{html.escape(self.title)}</h1>{sub}"
                + "\n".join(self.parts) + "</main></body></html>\n")


def _cell(v) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f'<td class="num">{html.escape(str(v))}</td>'
    return f"<td>{html.escape('–' if v is None else str(v))}</td>"


def _plot(fig: go.Figure, width: int, n: int) -> str:
    """The figure drawn `width` px wide as a div and the script that draws it (plotly.js is in the head)."""
    fig = go.Figure(fig)  # a copy: the caller's figure keeps its own size
    fig.update_layout(width=width, autosize=False)
    plain = fig.to_plotly_json()
    # "</" inside a string (a prompt that reads "</script>") would end the script element early
    spec = json.dumps({"data": plain["data"], "layout": plain["layout"]}, cls=_encoder(),
                      separators=(",", ":")).replace("</", "<\\/")
    config = json.dumps({"displayModeBar": False, "responsive": False, "staticPlot": False})
    div = f"fig-{n}"
    return (f'<div id="{div}" style="width:{width}px;height:{fig.layout.height or 450}px"></div>'
            f"<script>(function(){{var s={spec};Plotly.newPlot(\"{div}\",s.data,s.layout,{config});}})();</script>")


def _encoder():
    from plotly.utils import PlotlyJSONEncoder

    return PlotlyJSONEncoder
