"""A new lesson fact built with two sets of pack settings, interleaved in one process, so that only the settings
differ between the builds compared (this machine's speed drifts by 10-30% within an hour; issue 38).

    python benchmarks/lesson_settings.py --before '{"trace_precision": "float32", "retrace_samples": null}'
    python benchmarks/lesson_settings.py --rounds 3 --before '{...}' --after '{...}'

Each build: the bench report's fact (evaluation/bench_report.py) into a new pack, on a cache overlay that keeps only
the statistics, templates and converted weights (as `editkit bench report`'s lesson section), methods ROME, MEMIT,
PMET and AlphaEdit. `--before` / `--after`: compute.Settings fields over today's defaults. One JSON line per build
(seconds per part), then the per-part medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from editkit.evaluation.bench_report import FACT, WARM, overlay  # noqa: E402
from editkit.lesson import compute  # noqa: E402
from editkit.lesson.build import build  # noqa: E402

METHODS = ["rome", "memit", "pmet", "alphaedit"]


def one(lm, s: compute.Settings) -> dict:
    with overlay(WARM), tempfile.TemporaryDirectory(prefix="editkit-pack-") as tmp:
        (Path(tmp) / "fact.json").write_text(json.dumps([FACT]), encoding="utf-8")
        out = build(Path(tmp) / "fact.json", Path(tmp) / "pack", lm=lm, methods=METHODS, settings=s,
                    progress=lambda f, m: None)
    return {"seconds": out["seconds"], "parts": {p["part"]: p["seconds"] for p in out["profile"]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", default="{}", help="Settings fields (JSON) of the first build of each round")
    p.add_argument("--after", default="{}", help="Settings fields (JSON) of the second")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    base = compute.Settings().to_dict()
    settings = {name: compute.Settings(**{**base, **json.loads(text)})
                for name, text in (("before", args.before), ("after", args.after))}
    lm = compute.load("gemma-3-270m")
    runs = {name: [] for name in settings}
    for rnd in range(args.rounds):
        for name, s in settings.items():
            row = one(lm, s)
            runs[name].append(row)
            print(json.dumps({"round": rnd + 1, "settings": name, **row}), flush=True)
    print(json.dumps({"median": {name: {"seconds": statistics.median(r["seconds"] for r in rs),
                                        **{part: statistics.median(r["parts"][part] for r in rs)
                                           for part in rs[0]["parts"]}}
                                 for name, rs in runs.items()},
                      "settings": {name: s.to_dict() for name, s in settings.items()}}), flush=True)


if __name__ == "__main__":
    main()
