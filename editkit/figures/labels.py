"""The names of metrics as tables and figures show them: each header names its metric's family, so a number is
never read without how it was measured."""
from __future__ import annotations

# Metric families, named in every table header (EasyEdit issue #125: one MEMIT run on GPT-J scores 96.0/54.9/11.8
# by token accuracy and 98.9/88.6/73.7 by probability comparison, so a number without its family misleads).
FAMILIES = {"p": "probability comparison P(new) vs P(true), teacher-forced",
            "t": "token accuracy: argmax tokens, teacher-forced",
            "g": "generated text (greedy for Gen. eff./gen., sampled for fluency/consistency)"}
FAMILY = {"efficacy": "p", "generalization": "p", "specificity": "p", "score": "p", "efficacy_magnitude": "p",
          "generalization_magnitude": "p", "specificity_magnitude": "p", "retention": "p", "kept": "p",
          "reliability": "t", "generalization_acc": "t", "locality": "t", "portability": "t",
          "gen_efficacy": "g", "gen_generalization": "g", "fluency": "g", "consistency": "g"}


def family(key: str, kind: str = "counterfact") -> str | None:
    """The family tag of a metric; zsRE's efficacy, generalization and specificity are token accuracies."""
    if kind == "zsre" and key in ("efficacy", "generalization", "specificity", "score"):
        return "t"
    return FAMILY.get(key)


def header(key: str, label: str | None = None, kind: str = "counterfact") -> str:
    """A table header that names the metric's family: 'Efficacy [p]' (legend() says what [p] is)."""
    name = label or key.replace("_", " ").capitalize()
    tag = family(key, kind)
    return f"{name} [{tag}]" if tag else name


def labelled(rows: list[dict], kind: str = "counterfact") -> list[dict]:
    """Table rows with each metric's column renamed to its header (the family named), for display."""
    return [{header(k, kind=kind) if family(k, kind) else k: v for k, v in row.items()} for row in rows]


# The lifelong tables' other columns as a reader sees them (the JSON keys stay what they are).
READABLE = {"edits": "Edits", "batch": "Batch", "complete": "Finished", "measured": "Edits measured",
            "base_fluency": "Fluency unedited", "perplexity": "Perplexity", "base_perplexity": "Perplexity unedited",
            "perplexity_ratio": "Perplexity / unedited", "total_relative_norm": "‖ΔW‖/‖W‖ all edited",
            "max_relative_norm": "‖ΔW‖/‖W‖ largest matrix", "seconds_per_edit": "Seconds per edit (its machine)",
            "collapsed_at": "Collapsed by edit"}


def readable(rows: list[dict], kind: str = "counterfact") -> list[dict]:
    """labelled(rows) with the remaining columns named for a reader (READABLE), for a page's table; the method's
    key is left out (its label names the column)."""
    return [{READABLE.get(k, k): v for k, v in row.items() if k != "method"} for row in labelled(rows, kind)]


def legend(keys=None, kind: str = "counterfact") -> str:
    """What the family tags in the headers of `keys` (all when None) mean."""
    used = {family(k, kind) for k in (keys or FAMILY)}
    return "; ".join(f"[{t}] {FAMILIES[t]}" for t in FAMILIES if t in used)


def short_param(name: str) -> str:
    """"model.layers.4.mlp.down_proj.weight" -> "L4 down_proj": a weight matrix as charts label it."""
    parts = name.replace(".weight", "").split(".")
    digits = [p for p in parts if p.isdigit()]
    return f"L{digits[0]} {parts[-1]}" if digits else name


def param_order(name: str):
    """Weight matrices in layer order."""
    digits = [int(p) for p in name.split(".") if p.isdigit()]
    return (digits[0] if digits else -1, name)
