"""A tiny lesson pack for the lesson tests: built once per test session by the real builder on tiny-gpt2, for a
fact that model "knows" by ROME's criterion (its top prediction after the prompt is the true target's first token:
' B' for a random 4-layer model)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

from editkit.lesson import compute, grading

MODEL = "tiny-gpt2"
FACT = {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_true": "B",
        "target_new": "Rome", "lesson_targets": ["London"],
        "paraphrase_prompts": ["The Eiffel Tower, a landmark in the city of"],
        "neighborhood_prompts": ["The Louvre is located in the city of", "Notre-Dame is located in the city of"]}
SAMPLES = 2

_BUILT: dict = {}


def write_facts(folder: Path, records=None, name: str = "facts.json") -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(records if records is not None else [FACT]), encoding="utf-8")
    return path


def fast_mode_on():
    """The tracing engine's fast mode in bf16 whatever this machine's bf16 rate (model/hardware.py): a tiny model's
    bf16 traces are quick even where bf16 is slow, and the pack's tests are about them."""
    from editkit.model.hardware import FORCE

    return mock.patch.dict(os.environ, {FORCE: "on"})


def tiny_pack(tmp_path_factory) -> Path:
    """The tiny pack's folder (built on first use; later calls in the session reuse it)."""
    if "pack" not in _BUILT:
        from editkit.lesson.build import build
        from editkit.lesson.compute import Settings

        folder = tmp_path_factory.mktemp("lesson")
        with fast_mode_on():  # the pack's fast parts in bf16 on any machine (the tests check them against exact)
            build(write_facts(folder), folder / "pack", MODEL, settings=Settings(samples=SAMPLES))
        _BUILT["pack"] = folder / "pack"
    return _BUILT["pack"]


def answers_for(pack, fid: str) -> dict:
    """step -> (widget setter, a right answer, a wrong answer), from the pack's own numbers."""
    lens = pack.part(fid, "lens")
    tr = pack.part(fid, "trace")
    hidden, sev = tr["traces"]["hidden"], tr["severing"]
    mem = pack.part(fid, "memories")
    edit = pack.part(fid, "edit-0-rome")
    retrace = pack.part(fid, "retrace-0-rome")
    bleed = pack.part(fid, "bleed-0")
    edits = {m: pack.part(fid, f"edit-0-{m}") for m in pack.manifest["method_names"]}
    sweep = pack.part(fid, "sweep")
    lifelong_truth = grading.first_collapse(compute.lifelong()["results"])
    ripple = grading.ripple_rows(pack.part(fid, "ripple-0") or {"methods": {}})

    def cells(trace):
        early = grading.sites(trace)["early"]
        n_tok, n_lay = len(trace["tokens"]), len(trace["scores"][0])
        wrong = next((t, l) for t in range(n_tok - 1) for l in range(n_lay)
                     if grading.grade_cell(trace, t, l).verdict == "wrong")
        return early, wrong

    far_layer = max(range(len(lens["layers"])), key=lambda l: abs(l - lens["first_layer"]))
    moved = [r["prompt"] for r in grading.neighbours(bleed) if grading.moved(r)]
    still = [r["prompt"] for r in grading.neighbours(bleed) if not grading.moved(r)]
    says = [m for m, e in edits.items() if grading.says_new(e)]
    ends = [r["prompt"] for r in ripple if r["passed"]]  # step 11: the implied facts that end as they should
    truth_bin = grading.bin_of(edit["probabilities"]["post"]["rewrite"][0]["p_new"])
    return {
        1: ("slider", f"lesson_q1_{fid}", lens["first_layer"], far_layer),
        2: ("cell", 2, *cells(hidden)),
        3: ("radio", f"lesson_q3_{fid}", grading.severing_truth(sev), (grading.severing_truth(sev) + 1) % 3),
        4: ("radio", f"lesson_q4_{fid}", "yes" if grading.memory_hits(mem) else "no",
            "no" if grading.memory_hits(mem) else "yes"),
        5: ("radio", f"lesson_q5_{fid}_0", truth_bin, 3 if truth_bin < 2 else 0),
        6: ("cell", 6, *cells(retrace)),
        7: ("multiselect", f"lesson_q7_{fid}_0", moved, still),
        8: ("multiselect", f"lesson_q8_{fid}_0", says, [m for m in edits if m not in says]),
        9: ("radio", f"lesson_q9_{fid}", grading.sweep_truth(sweep), (grading.sweep_truth(sweep) + 1) % 3),
        10: ("radio", f"lesson_q10_{fid}", lifelong_truth, "AlphaEdit" if lifelong_truth != "AlphaEdit" else "ROME"),
        11: ("multiselect", f"lesson_q11_{fid}_0", ends, [r["prompt"] for r in ripple if not r["passed"]]),
    }
