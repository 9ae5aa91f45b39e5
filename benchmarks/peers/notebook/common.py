"""The peer comparison of the manual's "Beyond the recipes" tasks (docs/results/peers.md): editkit, TransformerLens,
nnsight and pyvene on the same tasks and the same model, each script timing its tasks and counting the lines a user
writes for each (the non-blank, non-comment lines between `# <task>` and `# end <task>`).

Tasks: load a transformers model object; read three sites (the residual entering block 6, its attention output, its
MLP output) for a batch of three prompts; predict the next token for the batch; compute causal-tracing cells of the
MLP panel (ROME's noise, 3 samples, window 10) and compare them with editkit's panel; editkit also rebuilds one cell
with `intervene` and the same cells by hand. The model is SmolLM2 135M (a Llama layout all four libraries know),
from editkit's converted folder. The peers run in a virtual environment of their own (they pin other versions):

    python -m venv /work/scratch/peers-venv && /work/scratch/peers-venv/bin/pip install torch transformers \
        transformer-lens nnsight pyvene
    PYTHONPATH=$PWD python benchmarks/peers/notebook/editkit_tasks.py          # first: the others compare with it
    for t in transformerlens nnsight pyvene; do
        /work/scratch/peers-venv/bin/python benchmarks/peers/notebook/${t}_tasks.py; done

Each writes <name>.json into $PEERS_OUT (default /tmp/editkit-peers).
"""
import json
import os
import time
from pathlib import Path

FOLDER = Path(os.environ.get("PEERS_MODEL", os.path.expanduser("~/.cache/editkit/models/smollm2-135m.v1")))
OUT = Path(os.environ.get("PEERS_OUT", "/tmp/editkit-peers"))
PROMPTS = ["The Space Needle is in downtown", "The Eiffel Tower is located in the city of",
           "Danielle Darrieux's mother tongue is"]
PROMPT, SUBJECT = "The Space Needle is in downtown", "Space Needle"
LAYER = 6
SAMPLES, SEED, WINDOW = 3, 1, 10


class Timer:
    """Wall seconds of a `with` block into results[name], and the process's CPU seconds (all its threads) into
    results["cpu"][name]: on a shared machine the wall time depends on the load, the CPU time far less."""

    def __init__(self, name: str, results: dict):
        self.name, self.results = name, results

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def __exit__(self, *exc):
        self.results[self.name] = round(time.perf_counter() - self.t0, 2)
        self.results.setdefault("cpu", {})[self.name] = round(time.process_time() - self.c0, 2)


def loc(path, task: str) -> int:
    """Non-blank, non-comment lines between '# <task>' and '# end <task>' markers of a script."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip() == f"# {task}")
    end = next(i for i, x in enumerate(lines) if x.strip() == f"# end {task}")
    return sum(1 for x in lines[start + 1:end] if x.strip() and not x.strip().startswith("#"))


def reference() -> dict:
    """editkit's results (editkit_tasks.py), which the peers' cells are compared with."""
    return json.loads((OUT / "editkit.json").read_text())


def finish(name: str, out: dict, script: str, tasks) -> None:
    """Add the line counts and the load average, print, and write OUT/<name>.json."""
    out["loc"] = {k: loc(script, k) for k in tasks}
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))

