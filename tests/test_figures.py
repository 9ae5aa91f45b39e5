"""The page figures in editkit/figures/ draw the library's JSON results: one trace per thing shown, in the order
the pages lay them out."""
import math

from editkit.figures import memories
from editkit.figures.similarity import similarity_figure
from editkit.lens import LogitLens, logit_lens
from editkit.memories.inspect import memories_at


def test_logit_lens_figure(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    lens = logit_lens(lm, "The Eiffel Tower is located in the city of", k=4)
    fig = lens.figure()
    heat = fig.data[0]
    assert list(heat.x) == ["#1", "#2", "#3", "#4"] and len(heat.y) == len(lens.layers)
    assert heat.z[0][0] == lens.layers[0][0].prob and heat.text[0][0] == lens.layers[0][0].token
    assert LogitLens.from_json(lens.to_json()) == lens and len(lens.to_frame()) == 4 * len(lens.layers)


def test_memory_figures(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    view = memories_at(lm, "The Eiffel Tower is located in the city of", 1, top=5).to_json()
    bars = memories.contributions_figure(view["memories"]).data[0]
    assert list(bars.y) == [m["label"] for m in view["memories"]][::-1]  # the largest on top
    g = {"agreement": [0.1, 0.2], "median_rank": [30, 4], "compositional": [0.5, 0.6], "fixed_at": [0.2, 0.8],
         "fixed_by": [0.2, 1.0]}
    assert [t.name for t in memories.agreement_figure(g).data] == ["agreement", "median rank"]
    assert list(memories.composition_figure(g).data[0].y) == g["compositional"]
    assert [list(t.y) for t in memories.fixed_figure(g).data] == [g["fixed_at"], g["fixed_by"]]


def test_similarity_figure():
    band = {"mean": [0.9, 0.8], "low": [0.85, 0.7], "high": [0.95, 0.9]}
    r = {"layers": [0, 1], **{f"{c}_{m}": band for c in ("mhsa", "ffn") for m in ("cos", "jaccard")}}
    fig = similarity_figure(r, "jaccard", "Top-50 Jaccard similarity (logit lens)", [0, 1])
    assert [t.name for t in fig.data if t.showlegend is not False] == ["MHSA", "FFN"]
    assert list(fig.data[2].x) == [1, 2]  # layers counted from 1, as in PMET's figure
    assert fig.layout.yaxis.title.text == "Top-50 Jaccard similarity" and tuple(fig.layout.yaxis.range) == (0, 1)


def test_the_diagnostics_table_marks_cells_that_do_not_apply():
    """Every method's row has every column; what does not apply to a method is "–" (a missing key showed as "None"
    in Edit & compare's table), a column no method has is left out, and a request without a reached target is "–"
    in its list (it raised on None)."""
    from editkit.figures.editing import NOT_APPLICABLE, diagnostics_table

    out = {"methods": {
        "rome": {"label": "ROME", "seconds": 1.234, "info": {
            "target_reached": [0.91], "requests": [{"division_factor": 2.5, "losses": [{"loss": 1}] * 7}]}},
        "memit": {"label": "MEMIT", "seconds": 2.0, "info": {
            "target_reached": [0.8, None], "requests": [{"losses": [{"loss": 1}] * 5}, {"losses": [{"loss": 1}]}]}},
        "ultraedit": {"label": "UltraEdit", "seconds": 0.2, "info": {"requests": [{"losses": []}]}}}}
    rows = diagnostics_table(out)
    assert [r["method"] for r in rows] == ["ROME", "MEMIT", "UltraEdit"]
    assert all(None not in r.values() and len(r) == 5 for r in rows)
    assert [r["ROME division factor"] for r in rows] == ["2.5000", NOT_APPLICABLE, NOT_APPLICABLE]
    assert [r["target reached (per request)"] for r in rows] == ["0.91", "0.80, –", NOT_APPLICABLE]
    assert [r["optimisation steps"] for r in rows] == ["7", "5, 1", NOT_APPLICABLE]
    del out["methods"]["rome"]
    assert "ROME division factor" not in diagnostics_table(out)[0]


def test_each_p_true_cross_stands_over_its_own_bar():
    """Edit & compare's P(new) bars and P(true) crosses: every method's cross was drawn at the centre of the prompt's
    group, over another method's bar; each now shares its bar's offset group (scattermode 'group') and is outlined,
    so one drawn over its own bar, in the same colour, still shows."""
    from editkit.figures.editing import probability_figure

    rows = [{"p_new": 0.6, "p_true": 0.3}, {"p_new": 0.5, "p_true": 0.2}]
    out = {"pre": [{"probabilities": {"rewrite": rows}}],
           "methods": {m: {"label": m, "color": c, "post": [{"probabilities": {"rewrite": rows}}]}
                       for m, c in (("ROME", "#1b9e77"), ("MEMIT", "#d95f02"), ("PMET", "#7570b3"))}}
    fig = probability_figure(out, 0, "rewrite")
    bars = {t.name: t.offsetgroup for t in fig.data if t.type == "bar"}
    crosses = [t for t in fig.data if t.type == "scatter"]
    assert fig.layout.barmode == "group" and fig.layout.scattermode == "group"
    assert len(crosses) == len(bars) == 4 and len(set(bars.values())) == 4
    assert all(t.offsetgroup == bars[t.name] and t.marker.line.width for t in crosses)
    # each cross in its bar's colour family: the "before" ones dark grey (black matched no legend entry)
    before = next(t for t in crosses if t.name == "before")
    assert before.marker.color != "black" and all(t.marker.color == c for t in crosses for m, c in (
        ("ROME", "#1b9e77"), ("MEMIT", "#d95f02"), ("PMET", "#7570b3")) if t.name == m)


def test_the_notebook_before_after_crosses_stand_over_their_bars():
    from editkit.figures.editing import before_after_figure

    rows = [{"prompt": "a", "p_new": 0.1, "p_true": 0.7}]
    rep = {"method": "rome", "requests": [{"rewrite": "X is in", "target_new": "Rome", "pre": {"rewrite": rows},
                                           "post": {"rewrite": rows}}]}
    fig = before_after_figure(rep)
    assert fig.layout.scattermode == "group"
    bars = {t.legendgroup: t.offsetgroup for t in fig.data if t.type == "bar"}
    assert all(t.offsetgroup == bars[t.legendgroup] for t in fig.data if t.type == "scatter")


def test_weight_change_bars_switch_to_a_log_axis_when_they_span_decades():
    """Edit & compare's ||dW|| / ||W|| bars: UltraEdit's changes are ~100x smaller than ROME's, so on one linear axis
    its bars were invisible; a log axis (said in the axis title) when the bars differ by more than 20x, linear when
    they are comparable."""
    from editkit.figures.editing import norms_figure

    def out(values):
        return {"methods": {m: {"label": m, "color": "#1b9e77",
                                "info": {"norms": {"model.layers.4.mlp.down_proj.weight": {"relative_norm": v}}}}
                            for m, v in values.items()}}

    wide = norms_figure(out({"ROME": 0.05, "UltraEdit": 0.0004}))
    assert wide.layout.yaxis.type == "log" and "log scale" in wide.layout.yaxis.title.text
    assert list(wide.layout.yaxis.ticktext) == ["0.0002", "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05"]
    # every tick labelled in full, 1-2-5; the axis reaches 3x below the smallest bar, so it is no sliver
    assert wide.layout.yaxis.range[0] < math.log10(0.0004 / 2.9)
    close = norms_figure(out({"ROME": 0.05, "MEMIT": 0.02}))
    assert close.layout.yaxis.type in (None, "linear") and "log" not in close.layout.yaxis.title.text
