"""The Markdown tables of results manifest entries (evaluation/manifest.py), rebuilt from rows: what the README and
the manual show between `<!-- results: NAME -->` markers."""
from __future__ import annotations


def row_hparams(row: dict, model: str) -> dict:
    """A row's hyperparameters on `model`: {method: overrides} of `hparams`, with `by_model[model]` on top (a
    row that pins a setting one model's defaults have since changed)."""
    out = {m: dict(v) for m, v in (row.get("hparams") or {}).items()}
    for m, v in (row.get("by_model") or {}).get(model, {}).items():
        out[m] = {**out.get(m, {}), **v}
    return out


def md_row(cells: list[str]) -> str:
    """One Markdown table row; an empty cell is "| |"."""
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _num(x, d: int) -> str:
    return "n/a" if x is None else f"{x:.{d}f}"


def _interval(mean, ci, d: int, sign: bool = False) -> str:
    if mean is None:
        return "-"
    m = f"{mean:+.{d}f}" if sign else f"{mean:.{d}f}"
    return m if ci is None else f"{m} ± {ci:.{d}f}"


def ripple_cell(table, method: str, column: dict, d: int, show_diff: bool) -> str:
    """One cell of a ripple table (ripple_eval.RippleEvaluation): `column["show"]` is mean, mean+diff, diff, value
    or edits."""
    show = column.get("show", "mean")
    if show == "edits":
        return str(table.done.get(method, 0))
    cell = table.table.get(method, {}).get(column["measure"])
    if cell is None:
        return "-"
    diff = cell.get("diff")
    if show == "value":
        return _num(cell["mean"], d)
    if show == "diff":
        return "-" if diff is None else _interval(diff["mean"], diff["ci95"], d, sign=True)
    text = _interval(cell["mean"], cell["ci95"], d)
    if show == "mean+diff" and show_diff and diff is not None:
        text += f" (Δ {_interval(diff['mean'], diff['ci95'], d, sign=True)})"
    return text


def ripple_markdown(e: dict, table_of) -> str:
    """The entry's table: one row per `rows` item (label, method, hparams), one column per `columns` item (model,
    measure, show); `table_of(model, row)` gives the row's RippleEvaluation on that model."""
    d = int(e.get("decimals", 1))
    against = e.get("against", "memit")
    head = [e.get("head", "")] + [c["head"] for c in e["columns"]]
    lines = [md_row(head), "|" + "---|" * len(head)]
    for row in e["rows"]:
        cells = [row["label"]]
        for c in e["columns"]:
            if c["model"] not in row.get("models", [c["model"]]):
                cells.append("not run")
                continue
            table = table_of(c["model"], row)
            cells.append(ripple_cell(table, row["method"], c, d, row.get("diff", True) and row["method"] != against))
        lines.append(md_row(cells))
    return "\n".join(lines) + "\n"


def _norm(x: float) -> str:
    """||dW||/||W|| as the manual prints it: three decimals below 1, three figures above, whole from 100."""
    return f"{x:.3f}" if x < 1 else f"{x:.0f}" if x >= 100 else f"{x:#.3g}"


def _perplexity(row: dict, collapsed_at: int | None) -> str:
    p, r = row["perplexity"], row["perplexity_ratio"]
    value = f"{p / 1e6:.1f} million" if p >= 1e6 else f"{p:,.0f}" if p >= 1000 else f"{p:.2f}"
    ratio = f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x"
    gone = f", collapsed by {collapsed_at}" if collapsed_at is not None and collapsed_at <= row["edit"] else ""
    return f"{value} ({ratio}{gone})"


def lifelong_markdown(e: dict, runs: dict) -> str:
    """The entry's lifelong table (`table`: the checkpoints `at`, `labels` per run): per run and checkpoint the
    rates x100 (whole numbers on a checkpoint's sample, one decimal when every edit was measured), retention,
    fluency x100, perplexity (and its ratio to the unedited model's, with the collapse) and the accumulated
    ||dW||/||W||."""
    spec = e["table"]
    rated = [k for k in ("efficacy", "generalization", "specificity", "kept", "locality")
             if any(r.get(k) is not None for run in runs.values() for r in run.rows)]  # a file older than kept
    names = {"efficacy": "efficacy [p]", "generalization": "generalization [p]", "specificity": "specificity [p]",
             "kept": "kept [p]", "locality": "locality [t]"}
    fluency, condition = spec.get("fluency", True), spec.get("condition", False)
    head = [spec.get("head", "method"), "edits", *(names[k] for k in rated), "retention"] + \
        (["fluency [g]"] if fluency else []) + ["perplexity", "‖ΔW‖/‖W‖"] + (["cond(W + ΔW)"] if condition else [])
    lines = [md_row(head), "|" + "---|" * len(head)]
    for key, run in runs.items():
        label = spec.get("labels", {}).get(key, run.label or key)
        for row in (r for r in run.rows if r["edit"] in spec["at"]):
            d = 0 if row.get("sampled") else 1
            edits = f"{row['edit']:,} " + (f"(sample of {row['measured']})" if row.get("sampled") else "(all)")
            rates = [_num(100 * row[k], d) for k in rated]
            retention = "-" if row.get("retention") is None else _num(100 * row["retention"], d)
            cells = [label, edits, *rates, retention] + ([f"{100 * row['fluency']:.1f}"] if fluency else [])
            cells += [_perplexity(row, run.collapsed_at), _norm(row["total_relative_norm"])]
            if condition:  # the largest over the edited matrices (PRUNE's quantity)
                cells.append(f"{max(row['condition'].values()):.0f}")
            lines.append(md_row(cells))
    return "\n".join(lines) + "\n"


def _ranges(layers: list[int]) -> str:
    """[0, 1, 2, 6, 9, 10] -> 'layers 0-2, 6 and 9-10'."""
    runs, start = [], None
    for i, l in enumerate(layers):
        if start is None:
            start = l
        if i + 1 == len(layers) or layers[i + 1] != l + 1:
            runs.append(f"{start}-{l}" if l > start else f"{l}")
            start = None
    return "layers " + (", ".join(runs[:-1]) + " and " + runs[-1] if len(runs) > 1 else runs[0])


def aie_markdown(runs: dict) -> str:
    """The AIE summary (docs/results/tracing.md): per shipped run (model label -> AIE) the MLP peak at the last
    subject token with its interval and relative depth, the layers at half that peak or more, and the peaks of
    attention at the last token and of the hidden state at the last subject token."""
    def depth(run, l: int) -> str:
        return f"depth {l / (run.layers - 1):.2f}"

    def mlp(run) -> str:
        l, m = run.peak("mlp", "last subject")
        band = run.kinds["mlp"]["last subject"]
        return f"layer {l}, AIE {m:+.3f} [{band.low[l]:.3f}, {band.high[l]:.3f}], {depth(run, l)}"

    def half(run) -> str:
        _, m = run.peak("mlp", "last subject")
        return _ranges([i for i, v in enumerate(run.kinds["mlp"]["last subject"].mean) if v >= m / 2])

    def attn(run) -> str:
        l, m = run.peak("attn", "last token")
        return f"layer {l}, {m:+.2f}, {depth(run, l)}"

    def hidden(run) -> str:
        l, m = run.peak("hidden", "last subject")
        return f"layer {l}, {m:+.3f}"

    rows = [("MLP at the last subject token: peak", mlp), ("MLP at the last subject token: ≥ half the peak", half),
            ("attention at the last token: peak", attn), ("hidden state at the last subject token: peak", hidden)]
    head = ["site"] + [f"{label} ({run.layers} layers)" for label, run in runs.items()]
    lines = [md_row(head), "|" + "---|" * len(head)]
    lines += [md_row([site] + [cell(run) for run in runs.values()]) for site, cell in rows]
    return "\n".join(lines) + "\n"
