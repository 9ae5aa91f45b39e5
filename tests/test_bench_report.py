"""`python -m editkit bench report`: the markdown it writes (machine, load average, goals met or missed, each
section's table) from a report's numbers, its flags' clear errors, and one cheap run end to end on a tiny model
(the tracing and edit sections; the long ones skipped by flag)."""
import json

from editkit.cli import main
from editkit.evaluation.bench_report import goals, machine, to_markdown


def _report() -> dict:
    row = {"kind": "hidden", "engine_s": 4.1, "block_gmac_per_s": 55.0, "unembed_gmac_per_s": 80.0,
           "bound": "blocks: 60% of the engine's time", "bf16_engine_s": 1.5, "bf16_max_abs_diff": 0.004,
           "reference_s": 88.0, "ratio": 19.5}
    return {"model": "gemma-3-270m", "editkit": "git abc", "machine": {**machine(), "load_average": [0.1, 0.2, 0.3]},
            "load_average_end": [0.2, 0.2, 0.3],
            "tracing": {"prompt": "The Space Needle is in downtown", "tokens": 7, "layers": 18, "samples": 10,
                        "setup_s": 0.4, "block_matmul_gmac_per_s": 80.0, "unembed_gmac_per_s": 85.0,
                        "results": [row], "three_panels_s": 12.5, "one_schedule_total_s": 12.0, "severing_s": 0.8,
                        "bf16_three_panels_s": 4.9},
            "edits": {"statistics_s": 0.1, "rome_speedup": 2.7, "results": [
                {"method": "rome", "requests": 1, "seconds": 3.2, "cpu_seconds": 5.0, "steps": 9,
                 "seconds_per_step": 0.3, "efficacy": 1.0, "generalization": 1.0},
                {"method": "memit", "requests": 1, "seconds": 5.4, "cpu_seconds": 8.0, "steps": 8,
                 "seconds_per_step": 0.4, "efficacy": 1.0, "generalization": 0.5}]},
            "lesson": {"seconds": 71.0, "statistics_s": 0.5, "methods": ["rome", "memit"], "load_average": [0.5],
                       "parts": [{"part": "logit lens", "seconds": 0.6, "cpu_seconds": 0.9}]}}


def test_the_markdown_says_the_machine_the_goals_and_each_section():
    r = _report()
    r["goals"] = goals(r)
    text = to_markdown(r)
    assert "load average" in text and "[0.1, 0.2, 0.3] at the start" in text and str(r["machine"]["cores"]) in text
    met = {g["goal"]: g["met"] for g in r["goals"]}
    assert met["a new fact in a lesson pack (statistics cached)"] is True
    assert met["three exact panels (hidden, MLP, attention; float32)"] is False
    assert met["the slowest one-request edit (memit)"] is False  # 5.4 s: the slowest, over 5 s
    assert "| three exact panels (hidden, MLP, attention; float32) | 12.5 s | < 10 s | missed |" in text
    assert "| hidden | 4.1 s |" in text and "19.5x" in text and "| logit lens | 0.6 | 0.9 |" in text


def test_both_loads_are_reported_with_their_priority():
    """The page's job beside busy loops at normal priority and beside loops at nice 19, each against the 3-minute
    goal; a report saved before the loops had a niceness reads as normal priority."""
    r = _report()
    loaded = {"seconds": 217.8, "statistics_s": 0.0, "methods": ["rome"], "load_average": [3.6], "busy_loops": 2,
              "parts": [{"part": "logit lens", "seconds": 0.8, "cpu_seconds": 0.7}]}
    r["lesson_under_load"] = dict(loaded)  # no busy_niceness: saved before it was recorded
    r["lesson_beside_background"] = {**loaded, "seconds": 150.0, "busy_niceness": 19}
    r["goals"] = goals(r)
    met = {g["goal"]: g["met"] for g in r["goals"]}
    assert met["the same as the page's job, 2 busy loops at normal priority beside it"] is False
    lowest = "the same as the page's job, 2 busy loops at the lowest priority (nice 19, own session) beside it"
    assert met[lowest] is True
    text = to_markdown(r)
    assert ("## The same fact as the page's job, with a busy loop at the lowest priority (nice 19, own session) "
            "on every core") in text
    assert "## The same fact as the page's job, with a busy loop at normal priority on every core" in text
    assert "OpenMP spin count" in text


def test_editkit_sets_a_short_openmp_spin_before_torch_loads_and_keeps_the_users():
    """GOMP_SPINCOUNT (core/threads.py): set by `import editkit` in a fresh process, before torch is imported
    (libgomp reads it when torch loads it); a value the user set is kept; torch loaded first is reported as
    libgomp's default."""
    import os
    import subprocess
    import sys

    code = "import sys, os, editkit; print(os.environ['GOMP_SPINCOUNT'], 'torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["10000", "False"]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "GOMP_SPINCOUNT": "5"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["5", "False"]
    late = "import torch, editkit; from editkit.core.threads import spin_count; print(spin_count())"
    out = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None"]  # torch first: libgomp kept its default, and the report says so


def test_flags_are_checked_before_anything_runs(capsys):
    assert main(["bench", "report", "--skip", "tracing,nonsense", "--model", "no-such-model"]) == 2
    assert "--skip takes" in capsys.readouterr().err
    assert main(["bench", "report", "--reference", "some", "--model", "no-such-model"]) == 2
    assert "--reference is hidden, all or none" in capsys.readouterr().err


def test_a_tiny_report_end_to_end(tmp_path, capsys):
    out = tmp_path / "report.md"
    skip = "lesson,lesson-under-load,steps,first-use"
    assert main(["bench", "report", "--model", "tiny-gpt2", "--skip", skip, "--reference", "none", "--out", str(out),
                 "--save-json", str(tmp_path / "r.json")]) == 0
    text = out.read_text()
    assert text.startswith("# editkit benchmark report: tiny-gpt2") and "## Causal tracing" in text
    assert "## Edits" in text and "the slowest one-request edit" in text
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["tracing"]["three_panels_s"] > 0 and "lesson" not in saved


def test_the_lesson_section_builds_one_new_fact_per_part(tiny_by_name, monkeypatch):
    """The report's lesson section on a tiny model (with a fact that model knows): a new pack on a cache overlay,
    its profile per part, and the real cache untouched by the pack's results."""
    from editkit.core.paths import cache_dir
    from editkit.evaluation import bench_report
    from lesson_util import FACT

    monkeypatch.setattr(bench_report, "FACT", FACT)
    real = cache_dir()
    out = bench_report._lesson(tiny_by_name("tiny-gpt2"), bench_report.WARM, say=lambda row: None)
    assert cache_dir() == real  # the overlay is gone
    parts = [p["part"] for p in out["parts"]]
    assert parts[0] == "logit lens" and any("layer sweep" in p for p in parts)
    # the parts ran inside the total; the build rounds the total to 0.1 s and each part to 0.01 s
    slack = 0.05 + 0.005 * len(out["parts"])
    assert out["seconds"] >= sum(p["seconds"] for p in out["parts"]) - slack and out["methods"]
