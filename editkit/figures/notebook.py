"""How a figure shows itself in a notebook, with no network: plotly's own mimetype, and HTML carrying
plotly.js.

A display bundle holds both forms. JupyterLab, Notebook 7 and VS Code draw `application/vnd.plotly.v1+json`
with the plotly.js they ship; everything that reads HTML (nbconvert's HTML export, mkdocs-jupyter, GitHub's
viewer with scripts, classic frontends) reads `text/html`, whose script needs plotly.js on the page: the first
figure a kernel shows carries the whole library inline (4.8 MB, once), later ones only their data (plotly's
own HTML renderers load it from a CDN, a blank box offline, or embed it in every figure). An exported notebook
keeps the first figure's output, so its figures draw offline; re-running that cell alone in a long session
moves the library to the next figure shown, and a notebook run top to bottom (as `jupyter nbconvert --execute`
does) keeps it first.

Results show themselves through `bundle` (core/results.py's Result._repr_mimebundle_, via
`results.FIGURE_BUNDLE`). A bare figure (`tr.figure()`) goes through plotly's renderers: in a Jupyter kernel
where plotly chose its default ("plotly_mimetype", which has no HTML form) `use_in_notebook` adds this
module's renderer beside it; a renderer the user set (plotly.io.renderers.default, PLOTLY_RENDERER) is left as
it is.
"""
from __future__ import annotations

import json
import os
import threading

import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer

from ..core import results

MIMETYPE = "application/vnd.plotly.v1+json"
RENDERER = "editkit_offline"
CONFIG = {"displaylogo": False, "responsive": True}
_SENT = {"plotlyjs": False}  # whether this kernel has already shown a figure carrying plotly.js
_LOCK = threading.Lock()


def _include_plotlyjs() -> bool:
    """True the first time in this process (the figure that carries plotly.js), False after."""
    with _LOCK:
        first = not _SENT["plotlyjs"]
        _SENT["plotlyjs"] = True
    return first


def html(fig) -> str:
    """The figure as an HTML fragment that draws offline: plotly.js inline the first time, no MathJax, no
    CDN. A figure laid out at a fixed width (the tracing panels) keeps it, in a box that scrolls sideways
    where the notebook is narrower (a 100% wide box would cut its right-hand panels off)."""
    width = getattr(getattr(fig, "layout", None), "width", None) or (fig.get("layout", {}).get("width")
                                                                     if isinstance(fig, dict) else None)
    body = pio.to_html(fig, full_html=False, include_plotlyjs=_include_plotlyjs(), include_mathjax=False,
                       config=CONFIG, default_width=f"{int(width)}px" if width else "100%", validate=False)
    return f'<div style="overflow-x: auto">{body}</div>' if width else body


def bundle(fig) -> dict:
    """plotly's mimetype (the figure's JSON) and the offline HTML (module docstring)."""
    data = json.loads(pio.to_json(fig, validate=False, remove_uids=False))
    data["config"] = dict(CONFIG)
    return {MIMETYPE: data, "text/html": html(fig)}


class OfflineRenderer(MimetypeRenderer):
    """plotly renderer: the offline HTML of `html` (used beside plotly's own mimetype)."""

    def to_mimebundle(self, fig_dict):
        return {"text/html": html(fig_dict)}


def use_in_notebook() -> bool:
    """In a Jupyter kernel where plotly chose its default renderer itself, show bare figures with this
    module's HTML beside plotly's mimetype; True when it did."""
    from ..core.progress import in_notebook

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = OfflineRenderer()
    if not in_notebook() or os.environ.get("PLOTLY_RENDERER") or pio.renderers.default != "plotly_mimetype":
        return False
    pio.renderers.default = f"plotly_mimetype+{RENDERER}"
    return True


results.FIGURE_BUNDLE = bundle

__all__ = ["bundle", "html", "use_in_notebook", "OfflineRenderer", "MIMETYPE"]
