"""End to end in a real browser: `streamlit run app.py` in a subprocess, every page of app.py's PAGES opened in
Chromium (Debian's, via Playwright) on the embedded model, each page's main action run, no exception box and no
error alert, and a full-page screenshot of each page saved to $EDITKIT_SCREENSHOTS/<page>.png
(EDITKIT_SCREENSHOTS=assets/screenshots refreshes the README's and the manual's pictures; by default a scratch folder).

Slow (the embedded model loads, the causal trace runs on Gemma): in the full suite only (`--full`).
To give a new page a main action, add one entry to ACTIONS.
"""
from __future__ import annotations

import os
import tempfile

import pytest

from browser_util import (
    ROOT,
    SHOTS,
    free_port,
    own_address,
    pages,
    start_streamlit,
    stop_streamlit,
    wait_http,
    wait_idle,
)
from editkit.figures.tracing import TITLES

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

LOAD_S = 240  # the embedded model loads in ~10 s alone, much longer on a shared CPU
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


def _home(page):
    """The prediction for the Eiffel Tower prompt is " Paris" (top row of the table and the logit lens)."""
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=LOAD_S * 1000)
    page.wait_for_selector(".js-plotly-plot", timeout=LOAD_S * 1000)
    lens = page.locator(".js-plotly-plot").first.inner_text()
    assert "Paris" in lens, "the logit lens should show ' Paris' at the last layers"


def _charts(page) -> tuple[int, int]:
    """(estimate heatmaps, exact heatmaps) on the page, told apart by their titles."""
    charts = page.locator(".js-plotly-plot")
    texts = [charts.nth(i).inner_text() for i in range(charts.count())]
    estimates = sum("ESTIMATE" in t for t in texts)
    exact = sum(any(title in t for title in TITLES.values()) and "ESTIMATE" not in t for t in texts)  # not severing
    return estimates, exact


def _causal_tracing(page):
    """Trace the default prompt with 3 noise samples, ignoring the result cache: the preview (estimates) is drawn
    before the first exact panel. Cancel that trace (the page stays usable and says so), then trace again and wait
    for the three exact heatmaps."""
    samples = page.get_by_label("Noise samples n")
    samples.fill("3")
    samples.press("Tab")
    page.get_by_text("Recompute (ignore the cache)").click()
    page.get_by_role("button", name="Trace", exact=True).click()
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')]"
                           ".some(e => e.textContent.includes('ESTIMATE'))", timeout=LOAD_S * 1000)
    estimates, exact = _charts(page)
    assert estimates >= 1 and exact == 0, (estimates, exact)  # the preview came before any exact panel
    page.get_by_role("button", name="Cancel trace").click()
    page.get_by_text("Trace cancelled").first.wait_for(timeout=LOAD_S * 1000)
    wait_idle(page, timeout=LOAD_S)
    page.get_by_role("button", name="Trace", exact=True).click()
    page.wait_for_selector(f".js-plotly-plot, {ERRORS}", timeout=600_000)
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].filter(e => "
                           "e.textContent.includes('restored') && !e.textContent.includes('ESTIMATE')).length >= 3",
                           timeout=600_000)
    wait_idle(page, timeout=600)
    assert _charts(page)[1] == 3


def _ffn_memories(page):
    """Inspect the top memories of the last layer at the last token, with the Latin-script words added to the raw
    value tokens (the screenshot shows both; Noto fonts draw the other scripts)."""
    page.get_by_text("also: Latin-script words only (for teaching)").click()
    page.get_by_role("button", name="Inspect").click()
    page.get_by_text("Top memories of layer").first.wait_for(timeout=LOAD_S * 1000)
    page.wait_for_selector(".js-plotly-plot", timeout=LOAD_S * 1000)


def _edit_compare(page):
    """ROME, MEMIT and PMET on the default request (Danielle Darrieux -> English); the metrics table lists all three
    and the charts appear. The first run on a fresh cache also computes the statistics (minutes on a CPU)."""
    page.get_by_role("button", name="Edit and compare").click()
    page.get_by_text("P(new) vs P(true), prompt by prompt").first.wait_for(timeout=1_200_000)
    wait_idle(page, timeout=600)
    assert page.locator(".js-plotly-plot").count() >= 3
    # the table is a canvas; the charts' legends are text (the first chart on the page may be the operating
    # points' in their closed expander, so the legends of every chart are read)
    legend = " ".join(page.locator(".js-plotly-plot").all_inner_texts())
    for method in ("ROME", "MEMIT", "PMET"):
        assert method in legend, legend[:300]


def _attention_vs_ffn(page):
    """The similarity curves for the smallest fact set (the slider's Home key), MHSA and FFN charts."""
    slider = page.get_by_role("slider").first
    slider.focus()
    page.keyboard.press("Home")
    wait_idle(page, timeout=60)
    page.get_by_role("button", name="Compute similarity curves").click()
    page.wait_for_selector(f".js-plotly-plot, {ERRORS}", timeout=900_000)
    wait_idle(page, timeout=600)
    assert page.locator(".js-plotly-plot").count() >= 2


# page name (file stem, "home" for the default page) -> its main action; pages without one are only loaded
ACTIONS = {
    "home": _home,
    "causal_tracing": _causal_tracing,
    "ffn_memories": _ffn_memories,
    "edit_compare": _edit_compare,
    "attention_vs_ffn": _attention_vs_ffn,
}

PAGES = pages()


@pytest.fixture(scope="session")
def server():
    port = free_port()
    proc = start_streamlit(port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, proc)
        yield url
    finally:
        stop_streamlit(proc)


@pytest.fixture(scope="session")
def browser(chromium):
    return chromium


@pytest.fixture(scope="session")
def page(server, browser):
    """One browser tab for every page: the model is loaded once per session, as for a real user."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(LOAD_S * 1000)
    yield pg
    ctx.close()


def _no_errors(page, name):
    boxes = page.locator(ERRORS)
    texts = [boxes.nth(i).inner_text()[:500] for i in range(boxes.count())]
    assert not texts, f"page {name}: {texts}"


def test_pages_are_discovered():
    names = [n for n, _, _ in PAGES]
    assert names[0] == "home" and "causal_tracing" in names
    for name, path, _ in PAGES[1:]:
        assert (ROOT / "pages" / f"{path}.py").exists(), name


@pytest.mark.parametrize("path,heading", [("lesson", "Lesson: locate, then edit"),
                                          ("causal_tracing", "Causal tracing")])
def test_a_page_opened_by_its_url_on_a_fresh_server_has_the_apps_navigation(browser, path, heading):
    """The first visitor of a fresh server opens a page by its URL: the page shows, and the sidebar lists the app's
    pages by title (not Streamlit's file list with `app` and `ui`)."""
    port = free_port()
    proc = start_streamlit(port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, proc)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = ctx.new_page()
        pg.set_default_timeout(LOAD_S * 1000)
        pg.goto(f"{url}/{path}")
        pg.get_by_role("heading", name=heading).first.wait_for()
        wait_idle(pg, timeout=LOAD_S)
        nav = pg.locator('[data-testid="stSidebarNav"]').inner_text().splitlines()
        nav = [line.strip() for line in nav if any(c.isalpha() for c in line)]  # titles (icons dropped)
        assert nav == [title for _, _, title in PAGES], nav
        assert pg.url.rstrip("/").endswith(path)
        _no_errors(pg, path)
        ctx.close()
    finally:
        stop_streamlit(proc)


def test_teacher_mode_on_the_servers_own_machine_at_127_0_0_1_and_never_from_elsewhere(browser):
    """A server listening on every address (Streamlit's default) sees a browser at http://127.0.0.1:PORT as
    ::ffff:127.0.0.1: teacher mode opens there without a passphrase (issue 60.1: "another machine
    (::ffff:127.0.0.1)"), and stays refused from this machine's own non-loopback address, as from elsewhere."""
    port = free_port()
    proc = start_streamlit(port, address=None)
    try:
        wait_http(f"http://127.0.0.1:{port}", proc)
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        pg = ctx.new_page()
        pg.set_default_timeout(LOAD_S * 1000)
        pg.goto(f"http://127.0.0.1:{port}/lesson?teacher=1")
        wait_idle(pg, timeout=LOAD_S)
        assert pg.get_by_role("heading", name="Teacher").count() == 1
        assert "another machine" not in pg.locator('[data-testid="stSidebar"]').inner_text()
        remote = own_address()
        if remote is not None:
            pg.goto(f"http://{remote}:{port}/lesson?teacher=1")
            wait_idle(pg, timeout=LOAD_S)
            assert pg.get_by_role("heading", name="Teacher").count() == 0
            assert f"Teacher mode from another machine ({remote}) needs a passphrase" in \
                pg.locator('[data-testid="stSidebar"]').inner_text()
        ctx.close()
    finally:
        stop_streamlit(proc)


@pytest.mark.parametrize("name,path,title", PAGES, ids=[p[0] for p in PAGES])
def test_page(page, server, name, path, title):
    page.goto(f"{server}/{path}")
    wait_idle(page, timeout=LOAD_S)
    _no_errors(page, name)
    action = ACTIONS.get(name)
    if action is not None:
        try:
            action(page)
        except Exception:
            page.screenshot(path=os.path.join(tempfile.gettempdir(), f"editkit-browser-failure-{name}.png"),
                            full_page=True)  # to see why
            raise
        wait_idle(page, timeout=LOAD_S)
        _no_errors(page, name)
    SHOTS.mkdir(parents=True, exist_ok=True)
    # Streamlit scrolls inside its own container: grow the viewport to the content so the shot holds all of it
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], section.main, "
        "[data-testid=\"stAppViewContainer\"]')].map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": 1400, "height": min(max(int(height), 1000), 6000)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
