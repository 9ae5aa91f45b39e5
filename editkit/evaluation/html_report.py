"""A comparison (or one edit) as one self-contained HTML file: what was edited, how every method did with its
95% intervals, the charts, the conclusion sentences, and how to reproduce it.

    cmp.report("report.html", bleed=bm, ripple=rr)    # Comparison.report (evaluation/compare.py)
    ed.report("edit.html")                            # EditReport.report (evaluation/report.py)
    editkit report --model M --requests R --methods rome,memit --out report.html   # commands/report.py

The document is laid out by figures/html.py (plotly.js inline once, a 1,040 px column that prints on A4
landscape). Efficacy, generalization and specificity are the metrics table's own (metrics.py), with a 95%
interval: over the records when there are several (as `editkit evaluate` reports), else over the request's
prompts. The conclusion is evaluation/verdict.py's sentence. A last section gives the editkit, model, torch and
transformers versions and the command line; the requests and hyperparameters it names are folded into the file
(requests.json, hparams.json), so the command runs as written.
"""
from __future__ import annotations

import json
import math
import platform
import shlex
import time
from pathlib import Path

from ..core.cache import atomic_write
from ..core.errors import EditkitError
from ..core.paths import new_file
from ..figures import editing as charts
from ..figures.html import PAGE, Document
from ..figures.labels import legend
from ..model.export import editkit_version
from .metrics import mean_ci
from .verdict import MARGIN_MEASURE, Ranking, margins, paired

THIRD = (PAGE - 2 * 16) // 3  # three charts side by side
RATES = (("efficacy", "Efficacy", "rewrite"), ("generalization", "Generalization", "paraphrase"),
         ("specificity", "Specificity", "neighborhood"))
INTERVALS = ("x100, mean ± 95% half-width (1.96 standard errors): over the records when there are several, "
             "else over the request's prompts (– for one prompt: no spread to estimate). Efficacy, "
             "generalization and specificity are those of the table below (metrics.py). The summed margin's ± "
             "is the noise of its difference from the best, paired prompt by prompt (evaluation/verdict.py): "
             "the measure of the conclusion above.")


def write(path, doc: Document, overwrite: bool = False) -> Path:
    """The document written to `path` at once (a temporary file renamed into place); an existing file is
    replaced only with `overwrite`, and a folder, a missing or read-only folder is said in a line."""
    target = new_file(path, overwrite)
    text = doc.render()
    try:
        out = atomic_write(target, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        out.chmod(0o644)  # a file to share (the temporary name was private)
    except OSError as exc:
        raise EditkitError(f"writing {path} failed ({exc.strerror or exc}); nothing was left behind") from exc
    return Path(path)


# --- parts every report has -------------------------------------------------------------------------------
def rate_interval(values: list, counts: list[int]) -> tuple[float, float] | None:
    """(mean, 95% half-width) of a rate: over the records when there are several, else over the prompts of the
    one record. A record's rate is its share p of k prompts won (1 or 0 each), whose sample variance is
    k p (1 - p) / (k - 1), so metrics.mean_ci of those prompts is 1.96 sqrt(p (1 - p) / (k - 1))."""
    pairs = [(v, k) for v, k in zip(values, counts) if v is not None]
    if not pairs:
        return None
    if len(pairs) > 1:
        return mean_ci([v for v, _ in pairs])
    p, k = pairs[0]
    return p, 1.96 * math.sqrt(p * (1 - p) / (k - 1)) if k > 1 else float("nan")


def _pct(pair) -> str:
    if pair is None or math.isnan(pair[0]):
        return "–"
    m, h = pair
    return f"{100 * m:.0f}" + ("" if math.isnan(h) else f" ± {100 * h:.0f}")


def interval_rows(cmp, ranking: Ranking) -> list[dict]:
    """Before the edit, then one row per method: efficacy, generalization and specificity with their intervals
    (rate_interval), and the verdict's summed margin with the noise of its difference from the best."""
    counts = {g: [sum("p_true" in r for r in p["probabilities"].get(g, [])) for p in cmp.pre]
              for _, _, g in RATES}
    first = next(iter(cmp.methods.values()))
    options = [("before edit", "pre_", first.metrics)]
    options += [(m.label, "post_", m.metrics) for m in cmp.methods.values()]
    rows = []
    for label, when, metrics in options:
        noise = ranking.noise.get(label)
        margin = ranking.fmt(ranking.values[label]) + ("" if noise is None else f" (± {ranking.fmt(noise, 2)})")
        cells = {f"{name} [p]": _pct(rate_interval([m.get(when + key) for m in metrics], counts[group]))
                 for key, name, group in RATES}
        rows.append({"": label, **cells, "summed margin": margin})
    return rows


def margin_ranking(options: dict) -> Ranking:
    """verdict.paired over the options' margins, prompt by prompt (option -> its measurements' probabilities,
    one per record; every record's prompts of a group together)."""
    per = {}
    for label, probabilities in options.items():
        groups: dict = {}
        for p in probabilities:
            for g, xs in margins(p).items():
                groups.setdefault(g, []).extend(xs)
        per[label] = groups
    return paired(per, f"the summed margin ({MARGIN_MEASURE}, averaged over the prompts)")


def request_section(doc: Document, requests: list) -> None:
    doc.heading("The request" + ("s" if len(requests) > 1 else ""))
    doc.table([{"prompt": r.rewrite, "subject": r.subject, "new target": r.target_new.strip(),
                "true target": (r.target_true or "").strip() or None,
                "paraphrases": len(r.paraphrase_prompts), "neighbours": len(r.neighborhood_prompts)}
               for r in requests])
    first = requests[0]
    lines = [f"paraphrase #{i + 1}: {p}" for i, p in enumerate(first.paraphrase_prompts)] + \
        [f"neighbour #{i + 1}: {p}" for i, p in enumerate(first.neighborhood_prompts)]
    if lines:
        doc.items(lines)


def reproduce_section(doc: Document, model: str, command: str, requests: list, hparams: dict | None) -> None:
    import torch
    import transformers

    doc.heading("Reproduce it")
    doc.table([{"model": model, "editkit": editkit_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "python": platform.python_version(),
                "written": time.strftime("%Y-%m-%d %H:%M")}])
    doc.text("The command that computes this report again (the requests and hyperparameter files it names "
             "are below, as editkit read them: save each under its name):")
    doc.code(command)
    doc.details(_named(command, "--requests", "requests.json"),
                json.dumps([r.to_dict() for r in requests], indent=1, ensure_ascii=False))
    if hparams:
        doc.details(_named(command, "--hparams", "hparams.json"), json.dumps(hparams, indent=1, ensure_ascii=False))


def _named(command: str, flag: str, default: str) -> str:
    """The file the command names after `flag` (the fold is saved under that name), else `default`."""
    words = shlex.split(command)
    return words[words.index(flag) + 1] if flag in words[:-1] else default


def command_line(words: list[str]) -> str:
    return shlex.join(["editkit", *words])


# --- a comparison -------------------------------------------------------------------------------------------
def comparison_document(cmp, conclusion: str, bleed=None, ripple=None, command: str | None = None):
    """The report of a Comparison (its model and settings as compare_methods recorded them): a Document."""
    out = cmp.to_json()
    first = cmp.requests[0]
    more = f" and {len(cmp.requests) - 1} more" if len(cmp.requests) > 1 else ""
    labels = [m.label for m in cmp.methods.values()]
    doc = Document(f"Edit comparison: {first.rewrite} → {first.target_new.strip()}{more}",
                   f"{cmp.model or 'model not recorded'} · {len(labels)} method(s): {', '.join(labels)}")
    request_section(doc, cmp.requests)
    doc.heading("Who did best")
    doc.text(conclusion, "conclusion")
    if ripple is not None and ripple.conclusion:
        doc.text("Ripple effects: " + ripple.conclusion, "conclusion")
    options = {"before edit": [p["probabilities"] for p in cmp.pre],
               **{m.label: [p["probabilities"] for p in m.post] for m in cmp.methods.values()}}
    doc.heading("Metrics with their intervals")
    doc.table(interval_rows(cmp, margin_ranking(options)), INTERVALS)
    doc.heading("Every metric (means over the records, x100)")
    doc.table(charts.by_column(charts.metrics_table(out)), "Each measure names its family: " + legend())
    _probability_section(doc, cmp, out)
    doc.heading("How big is the change? ‖ΔW‖ / ‖W‖ per edited matrix")
    doc.figures([(cmp.norms_figure(), PAGE, "")])
    doc.table(charts.diagnostics_table(out), charts.DIAGNOSTICS_BLANK)
    _generations_section(doc, cmp)
    if bleed is not None:
        _bleed_section(doc, bleed)
    if ripple is not None:
        _ripple_section(doc, ripple)
    settings = cmp.settings or {}
    _settings_section(doc, cmp)
    reproduce_section(doc, cmp.model, command or command_line(_compare_words(cmp)), cmp.requests,
                      settings.get("hparams"))
    return doc


def _settings_section(doc: Document, cmp) -> None:
    """Every method's hyperparameters as it ran (the defaults for this model, or the overrides applied): a
    reader sees which layers each one edited without rerunning it."""
    s = cmp.settings or {}
    overrides = s.get("hparams") or {}
    doc.heading("Settings")
    generated = any(p["generations"] for p in cmp.pre)
    doc.text(f"Each method ran with editkit's hyperparameters for {cmp.model or 'this model'} unless overridden "
             f"(--hparams); the full set of each is folded below. Generations: " +
             (f"{s.get('n_gen', 0)} sampled of {s.get('gen_tokens', 0)} tokens per generation prompt."
              if generated else "none (no generation prompts, or --n-gen 0)."))
    rows, folds = [], []
    for name, m in cmp.methods.items():
        hp = m.result.info.get("hparams") or {}
        rows.append({"method": m.label, "edited layers": ", ".join(map(str, hp.get("layers", []))) or None,
                     "hyperparameters from": hp.get("source"),
                     "overridden": ", ".join(sorted(overrides.get(name) or {})) or None})
        folds.append((f"{m.label}: hyperparameters", json.dumps(hp, indent=1, ensure_ascii=False)))
    doc.table(rows)
    for summary, text in folds:
        doc.details(summary, text)


def _compare_words(cmp) -> list[str]:
    """The `editkit report` arguments that compute this comparison again (files named as the report has them)."""
    s = cmp.settings or {}
    words = ["report", "--model", cmp.model, "--requests", "requests.json", "--methods", ",".join(cmp.methods),
             "--n-gen", str(s.get("n_gen", 1)), "--gen-tokens", str(s.get("gen_tokens", 30))]
    if s.get("hparams"):
        words += ["--hparams", "hparams.json"]
    return words + ["--out", "report.html"]


def _probability_section(doc: Document, cmp, out: dict) -> None:
    doc.heading("P(new) vs P(true), prompt by prompt")
    doc.text("Teacher-forced probability of each target after each prompt, before and after each edit: the "
             "rewrite and paraphrases should flip to the new target, the neighbourhood prompts should not move. "
             + charts.BARS_KEY)
    for j, req in enumerate(cmp.requests):
        figs = [(charts.probability_figure(out, j, g, THIRD), THIRD, charts.prompt_list(out, j, g, 40))
                for g in charts.GROUPS if out["pre"][j]["probabilities"].get(g)]
        if len(cmp.requests) > 1:
            doc.text(f"{req.rewrite} → {req.target_new.strip()}")
        doc.figures(figs)


def _generations_section(doc: Document, cmp) -> None:
    if not any(p["generations"] for p in cmp.pre):
        return
    doc.heading("Generations before and after")
    doc.text("Sampled (top-k 5) with the same seed before and after, so differences come from the edit.")
    rows = []
    for j, pre in enumerate(cmp.pre):
        for i, g in enumerate(pre["generations"]):
            rows.append({"": "before", "text": g["text"]})
            rows += [{"": m.label, "text": m.post[j]["generations"][i]["text"]} for m in cmp.methods.values()]
    doc.table(rows)


def _bleed_section(doc: Document, bleed) -> None:
    from ..editing.methods import get

    doc.heading(f"Why did neighbours move? The bleed map of {get(bleed.method).label}")
    doc.text("Each point is one prompt about another subject: x = the largest share s of the edit's change "
             "its tokens receive, y = how much P(new) rose. " + bleed.headline() + ".")
    doc.figures([(bleed.figure(), PAGE, "")])
    if bleed.check is not None:
        doc.text(f"Check: the predicted change ({bleed.formula}) matches the measured change of the edited "
                 f"layer's output at every token to {bleed.check['max_error']:.1e} of the largest change.",
                 "caption")


def _ripple_section(doc: Document, ripple) -> None:
    from ..data.implications import CRITERIA

    doc.heading("What should the edit move? Ripple effects")
    fig = ripple.figure()
    if fig is None:
        doc.text(ripple.message)
        return
    doc.text("Each cell is P(expected | prompt) after an edit, green where the implied fact moved (→) or stayed "
             "(=) as it should. Criteria: " + "; ".join(f"{k} = {v}" for k, v in CRITERIA.items()) + ".")
    doc.figures([(fig, PAGE, "")])
    doc.text(ripple.conclusion, "conclusion")


# --- one edit -----------------------------------------------------------------------------------------------
def edit_document(report, command: str | None = None) -> Document:
    """The report of one edit (EditReport): its requests, the margin before and after with its noise, every
    prompt's probabilities, the bars, the weight change, versions and the command."""
    result = report.result
    first = report.requests[0]
    doc = Document(f"Edit: {first.rewrite} → {first.target_new.strip()}",
                   f"{report.model} · {report.method}, {len(report.requests)} request(s)")
    request_section(doc, result.requests)
    options = {"before edit": [r.pre for r in report.requests],
               report.method: [r.post for r in report.requests]}
    ranking = margin_ranking(options)
    doc.heading("Did it take?")
    doc.text(ranking.sentence(), "conclusion")
    doc.table([{"": o, "summed margin": ranking.fmt(ranking.values[o]),
                "± noise of the difference": "–" if ranking.noise.get(o) is None else
                ranking.fmt(ranking.noise[o], 2)} for o in options],
              f"The margin: {MARGIN_MEASURE}; its noise paired prompt by prompt (evaluation/verdict.py).")
    doc.table([{"group": p.group, "prompt": p.prompt, "P(new) before": _round(p.p_new_pre),
                "P(new) after": _round(p.p_new_post), "P(true) before": _round(p.p_true_pre),
                "P(true) after": _round(p.p_true_post)} for r in report.requests for p in r.prompts()],
              "Teacher-forced probabilities of each target after each prompt.")
    doc.heading("P(new) vs P(true), before and after")
    for j in range(len(report.requests)):
        doc.figures([(report.figure(j), PAGE, "")])
    doc.heading("How big is the change? ‖ΔW‖ / ‖W‖ per edited matrix")
    doc.table([{"matrix": k, "‖ΔW‖": round(v["delta_norm"], 4), "‖W‖": round(v["weight_norm"], 2),
                "‖ΔW‖ / ‖W‖": round(v["relative_norm"], 5)} for k, v in result.info.get("norms", {}).items()])
    hparams = result.info.get("hparams")
    words = ["edit", "--model", report.model, "--method", report.method, "--requests", "requests.json"]
    if hparams:
        words += ["--hparams", "hparams.json"]
    reproduce_section(doc, report.model, command or command_line(words + ["--report", "report.html"]),
                      result.requests, hparams)
    return doc


def _round(p):
    return None if p is None else round(p, 4)
