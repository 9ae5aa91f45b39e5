"""Every figure editkit draws is readable at the width the pages give it (editkit/figures/readability.py): no legend
under a title or over a label, no colliding annotations, no text below theme.MIN_FONT (also inside heatmap cells),
no title cut off, no categories on a numeric axis. The figures are drawn from real results: the shipped lesson pack,
the shipped lifelong and AIE runs, and an Edit & compare run of every method on a tiny model; a new figure function
must get a case here (test_every_figure_function_has_a_case)."""
from __future__ import annotations

import copy
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import plotly.graph_objects as go
import pytest

import editkit.figures as figures_pkg
from editkit.figures import (
    editing,
    lens,
    lesson,
    lifelong,
    memories,
    points,
    ripple,
    side_effects,
    similarity,
    spectrum,
    tracing,
)
from editkit.figures.readability import problems
from editkit.figures.theme import WIDTHS as W
from editkit.lesson.pack import SHIPPED, Pack

DATA = Path(__file__).resolve().parent / "data"
PACK = Pack.open(SHIPPED)
FID = PACK.fact_ids[0]


def part(name: str, fid: str = FID) -> dict:
    return copy.deepcopy(PACK.part(fid, name))


def edits(t: int = 0) -> dict:
    return {m: part(f"edit-{t}-{m}") for m in PACK.manifest["method_names"]}


@pytest.fixture(scope="module")
def compared():
    """Every registered method on one CounterFact request, on a tiny model (what Edit & compare draws)."""
    from editkit.editing.methods import all_methods
    from editkit.evaluation import load_eval_set
    from editkit.evaluation.compare import compare_methods
    from editkit.model.loading import load_model

    return compare_methods(load_model("tiny-gpt2", device="cpu"), [m.name for m in all_methods()],
                           load_eval_set("counterfact", 1), n_gen=1, gen_tokens=5).to_json()


def _lifelong(which: str = "SHIPPED"):
    from editkit.evaluation import lifelong as runs
    from editkit.evaluation.lifelong import load_results, styled

    return {m: r.to_json() for m, r in styled(load_results(getattr(runs, which))).items()}


def _aie():
    from editkit.tracing.aie import shipped_runs

    return {m: r.to_json() for m, r in shipped_runs().items()}


def _geva(n=18):
    return {"agreement": [0.001 * l for l in range(n)], "median_rank": [3000 / (l + 1) for l in range(n)],
            "compositional": [0.5 + 0.02 * l for l in range(n)], "fixed_at": [0.02] * n,
            "fixed_by": [l / n for l in range(n)]}


def _similarity(n=18):
    band = {"mean": [0.9] * n, "low": [0.85] * n, "high": [0.95] * n}
    return {"layers": list(range(n)), **{f"{c}_{m}": band for c in ("mhsa", "ffn") for m in ("cos", "jaccard")}}


def _spectrum():
    rows = [{"layer": l, "width": 256, "eigenvalues": [10.0 ** (-i / 40) for i in range(256)],
             "null_dimension": 60, "null_energy": 0.004, "cut": 10.0 ** (-196 / 40)} for l in (3, 4, 5, 6, 7)]
    return {"model": "gemma-3-270m", "layers": rows, "rule_meaning": "energy: the smallest directions holding at most "
            "a fraction of E||k||²", "threshold": 0.01}


def _pareto():
    def cell(m):
        return {"mean": m, "ci95": 4.0}

    rows = [{"label": f"mom2_shrinkage={v}", "efficacy": cell(90 - 10 * i), "generalization": cell(70 - 8 * i),
             "gen_efficacy": cell(40 - 5 * i), "specificity": cell(60 + 8 * i), "score": 70.0, "pareto": True}
            for i, v in enumerate((0, 0.3, 0.6))]
    return {"method": "ROME", "set": "counterfact-val", "n": 10, "settings": rows,
            "fronts": {y: [0, 1, 2] for y in ("efficacy", "generalization", "gen_efficacy")},
            "unedited": {"specificity": cell(75.0)}}


def _points():
    """UltraEdit's shipped operating points on Gemma (a file: nothing computed), in the half-page column the
    Edit & compare page gives each of two methods."""
    from editkit.evaluation.manifest import operating_points

    return operating_points("ultraedit", "gemma-3-270m").to_json()


def _ripple_shares():
    cell = {"mean": 40.0, "ci95": 12.0}
    return {"model": "gemma-3-270m", "n": 10, "table": {m: {c: cell for c in ("logical", "aliasing", "specificity",
                                                                              "preservation")}
                                                        for m in ("MEMIT", "co-edit", "in-context")}}


def _ripple_every_method():
    """The shipped ripple part's outcomes in one column per registered method and the in-context reference, as
    Edit & compare draws them (the lesson's part has two columns; seven long labels were turned into the title)."""
    from editkit.editing.methods import all_methods

    out = part("ripple-0")
    one = out["methods"]["rome"]
    labels = [m.label for m in all_methods()] + [out["methods"]["in-context"]["label"]]
    return {**out, "methods": {label: {**one, "label": label} for label in labels}}


def _two_models():
    a, b = part("trace")["traces"]["hidden"], part("trace", PACK.fact_ids[1])["traces"]["hidden"]
    return {"gemma-3-270m": a, "smollm2-135m": b}


def _edit(c):
    """One method's EditResult JSON from the comparison (what `EditResult.figure()` draws in a notebook)."""
    m = c["methods"]["memit"]
    return {"method": "memit", "requests": c["requests"], "seconds": m["seconds"], "info": m["info"]}


def _report(c):
    """An EditReport JSON (`edit --json`) of the comparison's ROME edit."""
    r = c["requests"][0]
    return {"method": "rome", "requests": [{**r, "rewrite": r["prompt"].replace("{}", r["subject"]),
                                            "pre": c["pre"][0]["probabilities"],
                                            "post": c["methods"]["rome"]["post"][0]["probabilities"]}]}


def _evaluation():
    def cell(m):
        return {"mean": m, "ci95": 5.0}

    rates = ("efficacy", "generalization", "specificity")
    return {"model": "gemma-3-270m", "set": "counterfact", "n": 100, "batch": 1, "metric_family": "counterfact",
            "methods": {m: {**{f"pre_{k}": cell(20.0) for k in rates}, **{f"post_{k}": cell(80.0) for k in rates}}
                        for m in ("ROME", "MEMIT", "AlphaEdit")}}


def _estimate(trace):
    return {**trace, "meta": {**trace.get("meta", {}), "estimate": True}}


def _no_share(bleed):
    return {**bleed, "formula": None, "rows": [{**r, "share": None} for r in bleed["rows"]]}


# name -> (the figure, the narrowest width a page draws it at)
CASES = {
    "lens.logit_lens_figure": (lambda c: lens.logit_lens_figure(part("lens"), 10), W["three_quarters"]),
    "lens.predictions_figure": (lambda c: lens.predictions_figure(
        {"prompt": part("lens")["prompt"], "predictions": part("lens")["top"]}), W["half"]),
    "lens.logit_lens_figure k=20": (lambda c: lens.logit_lens_figure(part("lens"), 20), W["three_quarters"]),
    "lesson.lens_figure": (lambda c: lesson.lens_figure(part("lens")), W["three_quarters"]),
    "lesson.pick_grid": (lambda c: lesson.pick_grid(part("trace")["traces"]["hidden"], (3, 5), "Pick"), W["full"]),
    "lesson.trace_with_marks": (lambda c: lesson.trace_with_marks(part("trace")["traces"]["hidden"], (3, 5), (2, 3)),
                                W["full"]),
    "lesson.trace_with_marks mlp": (lambda c: lesson.trace_with_marks(part("trace")["traces"]["mlp"]), W["half"]),
    "lesson.memories_figure": (lambda c: lesson.memories_figure(part("memories")), W["full"]),
    "lesson.edits_figure": (lambda c: lesson.edits_figure(edits(), "neighborhood"), W["third"]),
    "lesson.retrace_figure": (lambda c: lesson.retrace_figure(part("retrace-0-memit"), "MEMIT",
                                                              part("edit-0-memit")["layers"]), W["third"]),
    "lesson.sweep_figure": (lambda c: lesson.sweep_figure(part("sweep"), part("trace")["traces"]["mlp"]),
                            W["full"]),
    "editing.probability_figure": (lambda c: editing.probability_figure(c, 0, "neighborhood"), W["third"]),
    "editing.norms_figure": (lambda c: editing.norms_figure(c), W["full"]),
    "editing.loss_figure": (lambda c: editing.loss_figure(c), W["full"]),
    # the notebook API's figures (editing/result.py, evaluation/report.py, evaluation/evaluate.py): a notebook's width
    "editing.edit_figure": (lambda c: editing.edit_figure(_edit(c)), W["full"]),
    "editing.before_after_figure": (lambda c: editing.before_after_figure(_report(c)), W["full"]),
    "editing.evaluation_figure": (lambda c: editing.evaluation_figure(_evaluation()), W["full"]),
    "editing.trace_figure": (lambda c: editing.trace_figure(part("retrace-0-alphaedit"), "AlphaEdit"), W["third"]),
    "lifelong.lifelong_figure": (lambda c: lifelong.lifelong_figure(_lifelong()), W["full"]),
    "lifelong.layer_figure": (lambda c: lifelong.layer_figure(_lifelong()), W["full"]),
    # ten matrices side by side: their "L12 down_proj" titles collided until they read "layer 12"
    "lifelong.lifelong_figure (1,000 edits)": (lambda c: lifelong.lifelong_figure(_lifelong("SHIPPED_1000")),
                                                W["full"]),
    "lifelong.layer_figure (1,000 edits)": (lambda c: lifelong.layer_figure(_lifelong("SHIPPED_1000")), W["full"]),
    "memories.contributions_figure": (lambda c: memories.contributions_figure(part("memories")["memories"]),
                                      W["full"]),
    "memories.agreement_figure": (lambda c: memories.agreement_figure(_geva()), W["third"]),
    "memories.composition_figure": (lambda c: memories.composition_figure(_geva()), W["third"]),
    "memories.fixed_figure": (lambda c: memories.fixed_figure(_geva()), W["third"]),
    "ripple.ripple_figure": (lambda c: ripple.ripple_figure(part("ripple-0")), W["full"]),
    "ripple.ripple_figure, every method": (lambda c: ripple.ripple_figure(_ripple_every_method()), W["full"]),
    "ripple.share_figure": (lambda c: ripple.share_figure(_ripple_shares()), W["full"]),
    "side_effects.pareto_figure": (lambda c: side_effects.pareto_figure(_pareto(), ("efficacy", "generalization",
                                                                                     "gen_efficacy")), W["full"]),
    "points.points_figure": (lambda c: points.points_figure(_points(), 3), W["half"]),
    "side_effects.bleed_figure": (lambda c: side_effects.bleed_figure(part("bleed-0")), W["full"]),
    "side_effects.bleed_figure without a share": (lambda c: side_effects.bleed_figure(_no_share(part("bleed-0"))),
                                                  W["full"]),
    "side_effects.layer_sweep_figure": (lambda c: lesson.sweep_figure(part("sweep"), None), W["full"]),
    "similarity.similarity_figure": (lambda c: similarity.similarity_figure(
        _similarity(), "jaccard", "Top-50 Jaccard similarity (logit lens)", [0, 1]), W["half"]),
    "spectrum.spectrum_figure": (lambda c: spectrum.spectrum_figure(_spectrum()), W["full"]),
    "tracing.heatmap": (lambda c: tracing.heatmap(part("trace")["traces"]["mlp"]), W["third"]),
    "tracing.heatmap estimate": (lambda c: tracing.heatmap(_estimate(part("trace")["traces"]["attn"])), W["third"]),
    "tracing.heatmap relative": (lambda c: tracing.heatmap(part("trace")["traces"]["hidden"], relative=True),
                                 W["half"]),
    "tracing.trace_panels": (lambda c: tracing.trace_panels(part("trace")["traces"]), 1260),  # its own width
    "tracing.severing_figure": (lambda c: tracing.severing_figure(part("trace")["severing"]), W["full"]),
    "tracing.aie_figure": (lambda c: tracing.aie_figure(_aie()["gemma-3-270m"], "mlp"), W["third"]),
    "tracing.aie_panels": (lambda c: tracing.aie_panels(_aie()["gemma-3-270m"]), W["full"]),
    "tracing.aie_depth": (lambda c: tracing.aie_depth(_aie(), "mlp", "last subject"), W["half"]),
    "tracing.depth_comparison": (lambda c: tracing.depth_comparison(_two_models()), W["full"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_figure_is_readable(name, compared):
    build, width = CASES[name]
    fig = build(compared)
    assert isinstance(fig, go.Figure), name
    assert problems(fig, width) == [], f"{name} at {width:.0f} px"


def figure_functions() -> set[str]:
    """Every public function of editkit/figures/ that returns a plotly figure ("module.function")."""
    found = set()
    for info in pkgutil.iter_modules(figures_pkg.__path__):
        module = importlib.import_module(f"editkit.figures.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_") and \
                    "Figure" in str(inspect.signature(fn).return_annotation):
                found.add(f"{info.name}.{name}")
    return found


def test_every_figure_function_has_a_case():
    covered = {name.split(" ")[0] for name in CASES}
    assert figure_functions() - covered == set()


# --- the check itself: each kind of defect it must find ----------------------------------------------------------
def test_the_check_finds_a_legend_under_the_title():
    """The step-10 layout before the fix: a horizontal legend at y = 1.08 hangs down over the figure's title."""
    fig = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], name=n) for n in ("ROME", "MEMIT", "PMET", "AlphaEdit")])
    fig.update_layout(height=660, margin={"t": 50}, legend={"orientation": "h", "y": 1.08}, title="Lifelong editing")
    assert any("legend is drawn over title" in p for p in problems(fig, W["full"]))


def test_the_check_fails_the_step_10_figure_as_it_was_and_passes_it_now():
    """Lesson step 10 asks which line is which method: the figure main drew before the theme (commit c2cb720's
    figures/lifelong.py on the shipped 500-edit run, stored as plotly JSON in tests/data) hung its legend over the
    title and used 10 px axis titles; the same shipped run drawn by today's lifelong_figure has neither."""
    before = go.Figure(json.loads((DATA / "step10-lifelong-before.json").read_text()))
    found = problems(before, W["full"])
    assert any("legend is drawn over title" in p for p in found), found
    assert any("10 px" in p for p in found), found
    assert problems(lifelong.lifelong_figure(_lifelong()), W["full"]) == []


def test_the_check_finds_colliding_labels_small_text_and_numbers_as_categories():
    fig = go.Figure(go.Bar(x=["1", "2"], y=[0.2, 0.5], name="a"))
    for layer in (0.4, 0.5, 0.6):
        fig.add_vline(x=layer, annotation_text=f"edited L{layer}", annotation_position="top")
    fig.update_layout(legend={"font": {"size": 9}}, showlegend=True)
    found = problems(fig, W["third"])
    assert any("collide" in p for p in found) and any("9 px" in p for p in found)
    assert any("read as numbers" in p for p in found)


def test_the_check_finds_column_labels_on_top_turned_into_the_title():
    """Edit & compare's ripple grid before the fix: seven methods' labels on a top x axis, too wide for their
    columns, turned by plotly up into the title's line."""
    labels = ["before", "ROME", "MEMIT", "PMET", "AlphaEdit", "UltraEdit", "Co-edit (MEMIT + implied)",
              "In-context reference"]
    fig = go.Figure(go.Heatmap(z=[[0.5] * 8] * 2, x=labels, y=["a fact → Rome", "another fact → Italy"]))
    fig.update_xaxes(side="top")
    fig.update_layout(height=188, margin={"l": 10, "r": 10, "t": 80, "b": 10},
                      title={"text": "P(expected answer) before and after each edit", "font": {"size": 13}})
    found = problems(fig, W["full"])
    assert any("tick labels are drawn over title" in p for p in found), found
    fig.update_xaxes(tickangle=0)  # drawn level instead, they run into each other
    assert any("collide" in p for p in problems(fig, W["full"]))


def test_the_check_finds_cell_text_plotly_would_shrink_and_a_title_cut_off():
    fig = go.Figure(go.Heatmap(z=[[0.1] * 10], text=[[" northwestern"] * 10], texttemplate="%{text}"))
    fig.update_layout(title="A title far too long for the third of a page that this figure gets on the page")
    found = problems(fig, W["third"])
    assert any("shrinks" in p for p in found) and any("cut off" in p for p in found)


def test_turned_tables_show_no_empty_cells():
    """A measure no run has is left out of a turned table; one run's missing value reads as a dash, not a blank
    (the 500-edit table showed empty Kept and Locality rows, recorded before those were measured)."""
    from editkit.figures.editing import by_column

    rows = [{"label": "A", "kept": None, "efficacy": 0.5, "collapsed_at": 200},
            {"label": "B", "kept": None, "efficacy": 0.25, "collapsed_at": None}]
    table = by_column(rows, "label")
    assert [r["measure"] for r in table] == ["efficacy", "collapsed_at"]
    assert table[1] == {"measure": "collapsed_at", "A": "200", "B": "–"}
    assert by_column([]) == []


def test_table_cells_fit_a_narrow_column():
    """The 1,000-edit table's cells ran out of their columns ("2.907e+0…", "0.09484" cut): numbers are written short,
    flags as words."""
    from editkit.figures.editing import by_column, cell

    assert [cell(v) for v in (29070.4, 771.5, 83.45, 1.009, 0.09484, 1000, 100.0, 0.0, True, False, None)] == [
        "29,070", "771.5", "83.5", "1.01", "0.0948", "1,000", "100", "0", "yes", "no", "–"]
    rows = [{"label": "A", "complete": True, "perplexity": 29070.4},
            {"label": "B", "complete": False, "perplexity": 1.0}]
    assert by_column(rows, "label") == [{"measure": "complete", "A": "yes", "B": "no"},
                                        {"measure": "perplexity", "A": "29,070", "B": "1"}]


def test_the_check_finds_a_title_under_the_toolbar():
    """Plotly's toolbar covered chart titles on hover (issue 60.17: step 5, the hidden-state panel, the
    ripple chart): a plain figure's title runs under its eight buttons; theme.figure keeps two and puts the
    title below their band, so the same title at the same width is clear of it."""
    from editkit.figures.theme import figure

    title = {"text": "restored MLP outputs, window 10", "font": {"size": 13}}
    plain = go.Figure(go.Heatmap(z=[[0.1, 0.9], [0.2, 0.3]]))
    plain.update_layout(title=title, height=300, margin={"t": 40, "b": 40})
    assert any("toolbar (shown on hover) covers title" in p for p in problems(plain, W["third"]))
    themed = figure(go.Heatmap(z=[[0.1, 0.9], [0.2, 0.3]]))
    themed.update_layout(title=title, height=300, margin={"t": 40, "b": 40})
    assert problems(themed, W["third"]) == []
    assert themed.layout.title.text == title["text"] and themed.layout.title.pad.t > 30  # the text kept, moved
