"""Editing: a ROME edit and 10-request MEMIT and PMET batches on the embedded model, statistics cached."""
import time

from ..models import load_model
from ..paths import DATA
from ..scoring import score_targets
from .api import run_edit
from .hparams import load_hparams
from .requests import parse_requests
from .stats import second_moment
from .weights import applied


def add_args(p):
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--n", type=int, default=10, help="requests in the MEMIT/PMET batch")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the reference run (ROME with the full model at every optimisation step)")


def _efficacy(lm, requests):
    prompts = [r.rewrite for r in requests for _ in (0, 1)]
    targets = [t for r in requests for t in (r.target_new, r.target_true)]
    s = score_targets(lm, prompts, targets)
    return sum(s[2 * i].logprob > s[2 * i + 1].logprob for i in range(len(requests))) / len(requests)


def run(args):
    lm = load_model(args.model)
    layers = sorted({l for m in ("rome", "memit", "pmet") for l in load_hparams(m, lm)["layers"]})
    t0 = time.perf_counter()
    second_moment(lm, layers, load_hparams("rome", lm)["mom2_n_tokens"])
    stats_s = time.perf_counter() - t0
    darrieux = parse_requests({"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux",
                               "target_new": "English", "target_true": "French"})
    batch = parse_requests(DATA / "counterfact" / "counterfact_500.json")[: args.n]
    rows = []
    runs = [("rome", darrieux, {}), ("memit", batch, {}), ("pmet", batch, {})]
    if not args.no_reference:
        runs.insert(1, ("rome", darrieux, {"reference_targets": True}))
    for method, requests, over in runs:
        result = run_edit(lm, method, requests, over)
        with applied(lm.model, result.delta):
            eff = _efficacy(lm, requests)
        label = method + (" (reference)" if over else "")
        steps = max(len(r["losses"]) for r in result.info["requests"])
        rows.append({"method": label, "requests": len(requests), "seconds": round(result.seconds, 2),
                     "steps": steps, "efficacy": eff})
        print(f"{label:17s} {len(requests):3d} request(s)  {result.seconds:6.1f} s  {steps:3d} steps  "
              f"efficacy {eff:.2f}", flush=True)
    out = {"model": lm.name, "statistics_s": round(stats_s, 2), "results": rows}
    if not args.no_reference:
        out["rome_speedup"] = round(rows[1]["seconds"] / rows[0]["seconds"], 2)
        print(f"ROME: {out['rome_speedup']}x faster than the reference optimisation (same steps, same result)")
    return out
