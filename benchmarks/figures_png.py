"""The manual's figures of shipped runs (docs/results/tracing.md) as PNG files, drawn by the same figure functions
as the app.

Plotly draws in the browser, so each figure is written as a self-contained HTML page (plotly.js inlined from the
installed package, no network) and photographed by the system chromium through Playwright, the pair the browser
tests use. Writes assets/figures/aie-<model>.png (ROME Fig. 2 for each shipped AIE run) and aie-depth.png (the
runs on a relative depth axis):

    python benchmarks/figures_png.py
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plotly.subplots import make_subplots  # noqa: E402

from editkit.core.paths import ASSETS  # noqa: E402
from editkit.figures.tracing import aie_depth, aie_panels  # noqa: E402
from editkit.tracing.aie import shipped_runs  # noqa: E402

OUT = ASSETS / "figures"


def figures() -> dict:
    """file name -> (figure, width in px)."""
    runs = {name: run.to_json() for name, run in shipped_runs().items()}
    out = {f"aie-{name}.png": (aie_panels(run), 1500) for name, run in runs.items()}
    if len(runs) > 1:
        both = make_subplots(rows=1, cols=2, subplot_titles=[
            "MLP outputs restored at the last subject token", "attention outputs restored at the last token"])
        for col, (kind, token) in enumerate((("mlp", "last subject"), ("attn", "last token")), 1):
            for trace in aie_depth(runs, kind, token).data:
                trace.showlegend = col == 1 and trace.showlegend is not False
                both.add_trace(trace, row=1, col=col)
            both.update_xaxes(title_text="relative depth, layer / (n_layers − 1)", range=[-0.02, 1.02], row=1,
                              col=col)
        both.update_yaxes(title_text="AIE", row=1, col=1)
        both.update_layout(title="Where each model recalls: average indirect effect by relative depth",
                           height=420, legend={"orientation": "h", "y": -0.2})
        out["aie-depth.png"] = (both, 1200)
    return out


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("no chromium on PATH (apt-get install chromium)")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=chromium())
        for name, (fig, width) in figures().items():
            html = Path(tmp) / "fig.html"
            fig.update_layout(width=width, template="plotly_white")
            fig.write_html(html, include_plotlyjs=True, full_html=True)
            page = browser.new_page(viewport={"width": width + 40, "height": 600})
            page.goto(html.as_uri())
            page.wait_for_selector(".main-svg")
            page.locator(".plotly-graph-div").screenshot(path=str(OUT / name))
            page.close()
            print(OUT / name)
        browser.close()


if __name__ == "__main__":
    main()
