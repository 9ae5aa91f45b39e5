"""One student walks the whole lesson in Chromium (`streamlit run app.py`, Debian's chromium via Playwright) on the
shipped pack: at every step a wrong answer first (the feedback says so), then "Answer again" and the right one (the
feedback says right), no exception or error box anywhere, and a screenshot of each revealed step saved to
$EDITKIT_SCREENSHOTS/lesson-<step>.png (EDITKIT_SCREENSHOTS=assets/screenshots refreshes the manual's; by
default a scratch folder).

The right answers come from the pack's own numbers (tests/lesson_util.answers_for). Marked `browser`.
"""
from __future__ import annotations

import os
import re
import tempfile

import pytest

from browser_util import ROOT, SHOTS, free_port, start_streamlit, stop_streamlit, wait_http, wait_idle

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

PACK = ROOT / "assets" / "lesson"
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
FEEDBACK = ('[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentWarning"], '
            '[data-testid="stAlertContentInfo"]')
T = 120_000  # ms: every step renders from the pack, so nothing here waits for the model


@pytest.fixture(scope="module")
def student(chromium):
    os.environ["EDITKIT_LESSON"] = str(PACK)  # the shipped pack, whatever a teacher added in this cache
    port = free_port()
    proc = start_streamlit(port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, proc)
        ctx = chromium.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        page.set_default_timeout(T)
        page.goto(f"{url}/lesson")
        page.get_by_role("heading", name="Lesson: locate, then edit").first.wait_for()
        wait_idle(page, timeout=T / 1000)
        yield page
        ctx.close()
    finally:
        os.environ.pop("EDITKIT_LESSON", None)
        stop_streamlit(proc)


def no_errors(page, where: str) -> None:
    boxes = page.locator(ERRORS)
    texts = [boxes.nth(i).inner_text()[:300] for i in range(boxes.count())]
    assert not texts, f"{where}: {texts}"


def choose(page, testid: str, label: str, option: str) -> None:
    """Pick `option` in the select / multiselect widget labelled `label` (Streamlit's react-aria combobox: a
    pointer-down on its input opens the list of role=option items)."""
    widget = page.locator(f'[data-testid="{testid}"]').filter(has_text=label).first
    box = widget.locator("input").first
    box.click()
    item = page.get_by_role("option", name=option, exact=True).first
    try:
        item.wait_for(timeout=10_000)
    except playwright_api.TimeoutError:  # the click landed while a rerun redrew the form: the input has focus, no list
        box.press("ArrowDown")  # react-aria opens the focused combobox's list with ArrowDown
    item.click()
    if testid == "stMultiSelect":  # its list stays open: close it by a click elsewhere (Escape would clear the
        close_list(page)  # combobox's input)


def close_list(page) -> None:
    """Close an open multiselect list by a click on the step's heading, and wait until the list is gone. While the
    list is open the popover hides the rest of the page from the accessibility tree (aria-hidden), so the heading
    is found by CSS, not by its role."""
    page.locator("h2").filter(has_text=re.compile(r"^Step \d+\. ")).first.click()
    page.locator('[role="listbox"]').first.wait_for(state="hidden", timeout=30_000)


def give(page, spec, value, labels: dict) -> None:
    """Enter an answer into the step's form (spec from lesson_util.answers_for) and check it."""
    kind = spec[0]
    if kind == "slider":
        slider = page.get_by_role("slider").first
        slider.focus()
        page.keyboard.press("Home")
        for _ in range(int(value)):
            page.keyboard.press("ArrowRight")
    elif kind == "cell":
        token, layer = value
        choose(page, "stSelectbox", "Token", labels["tokens"][token])
        box = page.get_by_label("Layer", exact=True)
        box.fill(str(layer))
        box.press("Tab")
    elif kind == "radio":
        group = page.get_by_role("radiogroup", name="Answer")
        group.get_by_text(labels.get(spec[1], {}).get(value, str(value)), exact=True).click()
    elif kind == "multiselect":
        label = {"_q7_": "They will move", "_q8_": "They will say it",
                 "_q11_": "They will give their expected answer"}[re.search(r"_q\d+_", spec[1]).group()]
        for option in value:
            choose(page, "stMultiSelect", label, labels.get(spec[1], {}).get(option, option))
    page.get_by_role("button", name="Check my answer").click()
    page.locator(FEEDBACK).first.wait_for()
    wait_idle(page, timeout=T / 1000, quiet=1.0)


def labels_for(pack, fid: str, specs: dict) -> dict:
    """How the page writes each answer (radio and option texts)."""
    from editkit.figures.lesson import token_labels
    from editkit.lesson import grading

    hidden = pack.part(fid, "trace")["traces"]["hidden"]
    methods = {m["name"]: m["label"] for m in pack.manifest["methods"]}
    ripple = grading.ripple_rows(pack.part(fid, "ripple-0"))  # an implied fact: its prompt, → or =, the answer
    implied = {r["prompt"]: f"{r['prompt']} {'→' if r['move'] else '='} {r['answer'].strip()}" for r in ripple}
    return {"tokens": token_labels(hidden),
            specs[3][1]: {i: c for i, c in enumerate(grading.SEVER_CHOICES)},
            specs[5][1]: {i: b[2] for i, b in enumerate(grading.BINS)},
            specs[8][1]: methods,
            specs[9][1]: {i: c for i, c in enumerate(grading.SWEEP_CHOICES)},
            specs[11][1]: implied}


def test_a_student_walks_the_lesson(student):
    from editkit.lesson.pack import Pack
    from lesson_util import answers_for

    page = student
    pack = Pack.open(PACK)
    fid = pack.fact_ids[0]
    specs = answers_for(pack, fid)
    labels = labels_for(pack, fid, specs)
    retrace = pack.part(fid, "retrace-0-rome")
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for step in range(1, 12):
            page.get_by_role("radiogroup", name="Step").get_by_text(str(step), exact=True).click()
            page.get_by_role("heading", name=re.compile(rf"^Step {step}\. ")).wait_for()
            wait_idle(page, timeout=T / 1000, quiet=1.0)
            no_errors(page, f"step {step}")
            if step == 6:
                from editkit.figures.lesson import token_labels

                labels["tokens"] = token_labels(retrace)
            spec = specs[step]
            give(page, spec, spec[-1], labels)  # wrong first
            text = page.locator(FEEDBACK).first.inner_text()
            assert text.startswith(("Wrong", "Close")), (step, text)
            page.get_by_role("button", name="Answer again").click()
            page.get_by_role("button", name="Check my answer").wait_for()
            wait_idle(page, timeout=T / 1000, quiet=1.0)
            give(page, spec, spec[-2], labels)
            text = page.locator('[data-testid="stAlertContentSuccess"]').first.inner_text()
            assert text.startswith("Right"), (step, text)
            no_errors(page, f"step {step} answered")
            page.get_by_role("heading", name=re.compile(rf"^Step {step}\. ")).scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / f"lesson-{step}.png"))
        assert "Your answers (11)" in page.locator('[data-testid="stSidebar"]').inner_text()
    except Exception:
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "editkit-lesson-walk-failure.png"), full_page=True)
        raise
