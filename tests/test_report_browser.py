"""The HTML report in Chromium: it draws every chart with the network cut off (no request leaves the file), fits a
1,400 px window without a horizontal scroll bar, and prints to PDF. Screenshots of the screen and of the printed
page go to $EDITKIT_SCREENSHOTS (report-screen.png, report-print.png, report.pdf)."""
import pytest

from browser_util import SHOTS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from editkit.evaluation import load_eval_set
    from editkit.evaluation.bleed import bleed_map
    from editkit.evaluation.compare import compare_methods, conclusion
    from editkit.evaluation.html_report import comparison_document
    from editkit.evaluation.ripple import ripple_view
    from editkit.model.loading import load_model

    lm = load_model("tiny-gpt2", device="cpu")
    records = load_eval_set("counterfact", 1)
    cmp = compare_methods(lm, ["rome", "memit", "alphaedit"], records, n_gen=1, gen_tokens=5)
    bleed = bleed_map(lm, "rome", records[0].request, relation=records[0].relation, n_facts=3)
    ripple = ripple_view(lm, records[0].request, ["rome"], records[0].relation or "")
    doc = comparison_document(cmp, conclusion(cmp).sentence(), bleed, ripple)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(doc.render(), encoding="utf-8")
    return path, len(doc.drawn)


def test_report_draws_offline_and_prints(chromium, report):
    path, figures = report
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
               else route.abort())
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length === {figures}", timeout=60_000)
    assert errors == []
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400  # no sideways scrolling
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "report-screen.png"), full_page=True)
    page.emulate_media(media="print")
    page.screenshot(path=str(SHOTS / "report-print.png"), full_page=True)
    pdf = page.pdf(path=str(SHOTS / "report.pdf"), prefer_css_page_size=True, print_background=True)
    assert pdf[:5] == b"%PDF-" and len(pdf) > 50_000
    page.close()
