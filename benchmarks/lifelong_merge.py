"""Join lifelong runs of one model on the same records into one results file (what the manual and Edit & compare
read): each `evaluate --sequential --save` file's run under a key of its own, and runs stopped before their end
rebuilt from their checkpoints' rows (a run that could not be finished: its rows as measured, marked incomplete).

    python benchmarks/lifelong_merge.py OUT.json --set counterfact-edit memit=memit.json pmet=pmet.json \\
        --partial 'memit+nas=CHECKPOINT:memit:{"nas_anchor": 995.3388}' --label "memit+nas=MEMIT + NAS" \\
        --note "memit=an NVIDIA H100 (float32)"
    python benchmarks/lifelong_merge.py OUT.json --set counterfact-edit memit=SHIPPED.json#memit new=new.json
    python benchmarks/lifelong_merge.py --dump-rows ROWS.json   # every checkpoint's rows in $EDITKIT_CACHE

--partial KEY=CHECKPOINT:TEMPLATE:HPARAMS: the rows of CHECKPOINT (a checkpoint file, `sequential/<model>/
<method>-<hash>.v1.safetensors` in the cache, or ROWS.json#NAME from --dump-rows, for a checkpoint on another
machine) with the settings of the run saved under TEMPLATE (a run above or a --template) and HPARAMS added;
--method KEY=METHOD: a --partial run of another registered method than its template's (no run of that method
was saved to take settings from); give its full hyperparameters as HPARAMS, and check that they name the
checkpoint (its file name is the hash of the run's settings).
--note appends where a run ran to its notes; --label names a variant in figures and tables."""
import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from editkit.editing.methods import get  # noqa: E402
from editkit.evaluation.lifelong import Lifelong, load_results  # noqa: E402


def pairs(items):
    return dict(item.split("=", 1) for item in items)


def progress(checkpoint: str) -> dict:
    """A checkpoint's JSON part (its rows, batches done, edit times): from the file, or from a --dump-rows file."""
    if "#" in checkpoint:
        rows_file, name = checkpoint.split("#", 1)
        return json.loads(Path(rows_file).read_text())[name]
    from safetensors import safe_open

    with safe_open(checkpoint, "pt") as f:
        return json.loads(f.metadata()["progress"])


def dump_rows(out: str) -> None:
    found = sorted(Path(os.environ.get("EDITKIT_CACHE", Path.home() / ".cache/editkit"), "sequential").rglob(
        "*.safetensors"))
    rows = {p.name: {k: v for k, v in progress(str(p)).items() if k not in ("took", "original")} for p in found}
    Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    for name, p in rows.items():
        print(name, "batches done", p["done"], "checkpoints at", [r["edit"] for r in p["rows"]])


def one_run(path: str):
    """The run of a --save file with one run, or FILE#KEY: the run saved under KEY in a merged file (the shipped
    one, to which a new run is added)."""
    file, _, key = path.partition("#")
    found = load_results(Path(file))
    if key:
        return found[key]
    (run,) = found.values()
    return run


def partial(template, checkpoint: str, hparams: dict, label: str | None):
    done = progress(checkpoint)
    rows = done["rows"]
    collapsed = next((r["edit"] for r in rows if r["collapsed"]), None)
    return replace(template, hparams={**template.hparams, **hparams}, rows=rows, batches_done=int(done["done"]),
                   complete=False, resumed_at_batch=0, edit_seconds=done["edit_seconds"], collapsed_at=collapsed,
                   checkpoint="", partial_final=None, label=label or template.label)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?")
    p.add_argument("runs", nargs="*", help="KEY=FILE: the run of FILE (a --save file with one run, or FILE#KEY2: "
                   "the run under KEY2 in a merged file) under KEY")
    p.add_argument("--set")
    p.add_argument("--partial", action="append", default=[])
    p.add_argument("--template", action="append", default=[],
                   help="KEY=FILE: a run only a --partial one takes its settings from (not in the output)")
    p.add_argument("--method", action="append", default=[], help="KEY=METHOD: a --partial run's own method")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--dump-rows", metavar="ROWS.json", help="write every checkpoint's rows in the cache, and stop")
    a = p.parse_intermixed_args()
    if a.dump_rows:
        return dump_rows(a.dump_rows)
    if not (a.out and a.set):
        p.error("OUT and --set are needed")
    labels, notes, methods = pairs(a.label), pairs(a.note), pairs(a.method)
    runs = {}
    for key, path in pairs(a.runs).items():
        runs[key] = replace(run := one_run(path), label=labels.get(key, run.label))
    templates = {key: one_run(path) for key, path in pairs(a.template).items()}
    for key, spec in pairs(a.partial).items():
        checkpoint, template, hparams = spec.split(":", 2)  # HPARAMS, JSON, has colons of its own
        base = runs[template] if template in runs else templates[template]
        if key in methods:
            base = replace(base, method=methods[key], label=get(methods[key]).label)
        runs[key] = partial(base, checkpoint, json.loads(hparams), labels.get(key))
    for key, note in notes.items():
        runs[key] = replace(runs[key], notes=f"{runs[key].notes} Run on {note}.")
    life = Lifelong.of(runs, a.set)
    Path(a.out).write_text(json.dumps(life.to_json(), indent=1) + "\n")
    print(life.conclusion())
    print(life.to_frame().to_string())


if __name__ == "__main__":
    main()
