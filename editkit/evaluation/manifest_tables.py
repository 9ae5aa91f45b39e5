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
