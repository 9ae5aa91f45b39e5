"""The manual's notebooks (docs/notebooks/): committed without outputs, and each runs top to bottom on the embedded
model (nbclient, a fresh kernel; full suite only); an executed notebook exported to HTML by nbconvert draws its
figures in Chromium with every network request refused."""
import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_and_they_are_in_the_manual():
    assert len(NOTEBOOKS) >= 2
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in nav, f"{path.name} is not in mkdocs.yml's nav"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_carry_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} cell {i} has outputs"


EXECUTED: dict = {}  # notebook name -> the notebook as this session's run left it (for the export check)
EXPORTED = "activations-and-interventions.ipynb"  # the notebook whose HTML export is opened offline


def execute(path: Path, folder: Path):
    """Run in a fresh kernel whose working folder is a scratch one (nothing written beside the notebook); the
    kernel sees this checkout through PYTHONPATH, and the shared cache (the embedded model, statistics) as the
    tests do."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", env)
        NotebookClient(nb, timeout=1800, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    EXECUTED[path.name] = nb
    return nb


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path):
    nb = execute(path, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.notebook
@pytest.mark.browser
def test_an_exported_notebook_draws_its_figures_with_no_network(chromium, tmp_path):
    """nbconvert's HTML export of the executed notebook, opened in Chromium offline with every request beyond the
    file refused: each figure output (plotly's mimetype beside its HTML) draws its plot, and the trace's heatmaps
    are drawn (plotly.js came inline in the first figure, figures/notebook.py)."""
    from nbconvert import HTMLExporter

    from browser_util import SHOTS

    nb = EXECUTED.get(EXPORTED) or execute(ROOT / "docs" / "notebooks" / EXPORTED, tmp_path)
    figures = sum("application/vnd.plotly.v1+json" in o.get("data", {})
                  for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert figures >= 2
    html, _ = HTMLExporter().from_notebook_node(nb)
    export = tmp_path / "export.html"
    export.write_text(html, encoding="utf-8")
    context = chromium.new_context(offline=True, viewport={"width": 1200, "height": 900})
    refused: list[str] = []

    def only_the_file(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    try:
        page = context.new_page()
        page.route("**/*", only_the_file)
        page.goto(export.as_uri(), wait_until="load")
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {figures}",
                               timeout=60_000)
        assert page.locator(".js-plotly-plot .heatmaplayer image").count() >= 4  # three panels, then mlp alone
        SHOTS.mkdir(parents=True, exist_ok=True)
        plot = page.locator(".js-plotly-plot").first
        plot.scroll_into_view_if_needed()
        plot.screenshot(path=str(SHOTS / "notebook-export-offline.png"))
    finally:
        context.close()
