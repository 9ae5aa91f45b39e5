"""Merge lifelong runs of one model on the same records into one results file (what the manual and Edit & compare
read): each `evaluate --sequential --save` file's runs under a key of its own, and runs stopped before their end
rebuilt from their checkpoints' rows (a run that could not be finished: its rows as measured, marked incomplete).

    python benchmarks/lifelong_merge.py OUT.json --set counterfact-edit \\
        memit=memit.json pmet=pmet.json "memit+encore=memit-encore.json" \\
        --partial "memit+nas=rows.json:memit-775306a56111.v1.safetensors:memit:{\\"nas_anchor\\": 995.3388}" \\
        --note "memit=NVIDIA H100, float32" --label "memit+encore=MEMIT + ENCORE (b 3.3)"

--partial KEY=ROWS:CHECKPOINT:TEMPLATE:HPARAMS takes the rows that rows.json (the checkpoints' JSON parts) holds for
CHECKPOINT, and the settings of the run saved under TEMPLATE (a run above or a --template) with HPARAMS added; --note appends to a run's notes
(where it ran); --label names a variant in figures and tables."""
import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from editkit.evaluation.lifelong import Lifelong, load_results  # noqa: E402


def pairs(items):
    return dict(item.split("=", 1) for item in items)


def partial(template, rows_file, checkpoint, hparams, label):
    progress = json.loads(Path(rows_file).read_text())[checkpoint]
    rows = progress["rows"]
    done = int(progress["done"])
    collapsed = next((r["edit"] for r in rows if r["collapsed"]), None)
    return replace(template, hparams={**template.hparams, **hparams}, rows=rows, batches_done=done, complete=False,
                   resumed_at_batch=0, edit_seconds=progress["edit_seconds"], collapsed_at=collapsed,
                   checkpoint="", partial_final=None, label=label or template.label)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("runs", nargs="+", help="KEY=FILE: the run of FILE (a --save file with one run) under KEY")
    p.add_argument("--set", required=True)
    p.add_argument("--partial", action="append", default=[])
    p.add_argument("--template", action="append", default=[],
                   help="KEY=FILE: a run only a --partial one takes its settings from (not in the output)")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    a = p.parse_args()
    labels, notes = pairs(a.label), pairs(a.note)
    runs = {}
    for key, path in pairs(a.runs).items():
        (run,) = load_results(Path(path)).values()
        runs[key] = replace(run, label=labels.get(key, run.label))
    templates = {key: next(iter(load_results(Path(path)).values())) for key, path in pairs(a.template).items()}
    for key, spec in pairs(a.partial).items():
        rows_file, checkpoint, template, hparams = spec.split(":", 3)
        base = runs[template] if template in runs else templates[template]
        runs[key] = partial(base, rows_file, checkpoint, json.loads(hparams), labels.get(key))
    for key, note in notes.items():
        runs[key] = replace(runs[key], notes=f"{runs[key].notes} Run on {note}.")
    life = Lifelong.of(runs, a.set)
    Path(a.out).write_text(json.dumps(life.to_json(), indent=1) + "\n")
    print(life.conclusion())
    print(life.to_frame().to_string())


if __name__ == "__main__":
    main()
