"""UltraEdit side by side with its reference code (XiaojieGu/UltraEdit) on the same converted model, the same
CounterFact requests and the same lr / ridge / layers, outside the product.

The reference code is not part of editkit: fetch it, check it out outside the repository, and point --upstream at
it (the harness puts that folder on sys.path and imports its `editor/ultraedit.py`, `nets.py`, `util.py`,
`model.py` and `data/zsre.py`). It needs omegaconf and nltk (imported by its util.py); `wandb` is imported by its
editor modules but only called in code paths this harness does not run, so a no-op stand-in is registered:

    git --git-dir=<mirror of github.com/XiaojieGu/UltraEdit> worktree add --detach /work/scratch/ultra/UltraEdit HEAD
    python -m venv --system-site-packages /work/scratch/ultra/venv
    /work/scratch/ultra/venv/bin/pip install omegaconf==2.3.0 nltk
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 /work/scratch/ultra/venv/bin/python \
        benchmarks/peers/ultraedit_reference.py compare --upstream /work/scratch/ultra/UltraEdit \
        --set counterfact-val --n 10 --rounds 2 --out /work/scratch/ultra/compare.json
    ... evaluate --set <records.json> --n 100 --modes single,sequence --out-dir /work/scratch/ultra/eval

What runs on each side. Reference: its model loader (`model.make_model`, float32: half False) on editkit's converted
folder; its dataset code (`ZSREDataset.tok_tuples` + `collate_fn`: prompt with the tokenizer's special tokens,
" " + answer without, labels -100 outside the answer, rows sorted by length, forward batches of 10); its
`ULTRAEDIT.cache` (keys and output gradients at the answer tokens, `token: ans`; the shared per-shape
`RunningMeanStd.update`), `predict_param_shifts` (the pseudo-values and the float32 ridge solve) and `edit_model`
(in place). editkit: `run_edit(lm, "ultraedit", ...)` with its SequenceState. Both edit the down-projections of
the same layers. The ridge: upstream's solve adds the identity; for ridge r != 1 the harness scales that identity
by r while `predict_param_shifts` runs (nothing else of upstream's code is changed).

`compare`: one or more rounds of `--n` requests; per round and layer the relative differences (||a - b|| / ||b||)
of the keys, the gradients, the running mean and std, the pseudo-values and the delta; the same with editkit's rows
put through upstream's variance update (to show which part of the difference that update explains); and per
record P(new) / P(true) on the rewrite, paraphrase and neighbourhood prompts before and after each side's edit.

`evaluate`: per implementation (editkit, upstream) and mode (single: each batch of `--batch` from the base model;
sequence: all batches one after another, upstream's `sequential_valid` loop), the records measured before and after
with editkit's lifelong measurement (evaluation/sequential.py `rates`: the CounterFact rates from mean per-token NLLs)
and summarised as the validation sweep summarises them (benchmarks/ultraedit_pareto.py: paired change of
specificity with its 95% interval; against the unedited model `kept`, the neighbourhood comparisons P(true) > P(new)
that come out as before, and `kept_correct`, of the neighbourhood prompts the unedited model got right the share
still right). `--token mask` runs upstream with keys and gradients at every token (the default of EasyEdit's port).
Each finished (implementation, mode, setting) is written to --out-dir and reused by a rerun.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.machinery
import json
import math
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ultraedit_pareto import cell, summary  # noqa: E402 - the same rates and intervals as the validation sweep

from editkit.editing.defaults import load_hparams  # noqa: E402
from editkit.editing.methods.ultraedit import RunningStats, ultraedit_update  # noqa: E402
from editkit.editing.run import run_edit  # noqa: E402
from editkit.evaluation.datasets import load_eval_set  # noqa: E402
from editkit.evaluation.lifelong_measures import rates  # noqa: E402
from editkit.evaluation.measure import measure  # noqa: E402
from editkit.model.loading import load_model, shipped_folder  # noqa: E402
from editkit.model.sites import Site  # noqa: E402
from editkit.model.weights import applied, combined  # noqa: E402

DEFAULT_UPSTREAM = "/work/scratch/ultra/XiaojieGu+UltraEdit"


# --- the reference code --------------------------------------------------------------------------------------------
def import_upstream(path: str):
    """Upstream's modules from its checkout (sys.path), with a no-op `wandb` (imported, never called here)."""
    root = Path(path).resolve()
    if not (root / "editor" / "ultraedit.py").exists():
        raise SystemExit(f"no UltraEdit checkout at {root} (editor/ultraedit.py missing)")
    if "wandb" not in sys.modules:
        stub = types.ModuleType("wandb")
        stub.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # find_spec (accelerate) needs one
        stub.init = stub.log = lambda *a, **k: None
        sys.modules["wandb"] = stub
    sys.path.insert(0, str(root))
    from data.zsre import ZSREDataset
    from editor import ultraedit
    from model import make_model
    from util import empty_cache
    return types.SimpleNamespace(ULTRAEDIT=ultraedit.ULTRAEDIT, ZSREDataset=ZSREDataset, make_model=make_model,
                                 empty_cache=empty_cache)


def upstream_config(folder: Path, layers, lr: float, round_size: int, rounds: int, work: Path, token: str = "ans"):
    """The Hydra config upstream's editor reads (config/config.yaml, editor/ultraedit.yaml, dataset/zsre.yaml),
    with this model's modules, float32 and the CPU."""
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "model": {"name_or_path": str(folder), "name": folder.name, "class_name": "AutoModelForCausalLM",
                  "edit_modules": [f"model.layers.{l}.mlp.down_proj" for l in layers], "half": False},
        "editor": {"name": "ultraedit", "lr": lr, "batch_size": 128, "token": token, "cache_dir": str(work),
                   "save_checkpoint": False, "load_checkpoint": False},
        "dataset": {"name": "counterfact", "n_edits": round_size, "batch_size": 10, "num_seq": rounds},
        "num_seq": rounds, "model_device": "cpu", "editor_device": "cpu", "model_cache": False})


def upstream_rounds(up, cfg, records, tok) -> list:
    """The requests as upstream's zsRE dataset builds them (src = rewrite prompt, ans = new target without its
    space, which tok_tuples adds back), one collated round of cfg.dataset.n_edits after another."""
    from torch.utils.data import DataLoader

    rows = [{"src": r.request.rewrite, "rephrase": (r.request.paraphrase_prompts or [r.request.rewrite])[0],
             "ans": r.request.target_new.strip(), "loc": (r.request.neighborhood_prompts or ["x"])[0],
             "loc_ans": (r.request.target_true or " x").strip()} for r in records]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(rows, f)
    ds = up.ZSREDataset(cfg.dataset, f.name, tok, "cpu")
    Path(f.name).unlink()
    loader = DataLoader(ds, cfg.dataset.n_edits, False, collate_fn=ds.collate_fn, drop_last=True)
    return list(loader)


@contextlib.contextmanager
def watched(editor, ridge: float):
    """While predict_param_shifts runs: each layer's normalised rows z_hat (the normaliser's forward outputs) and
    its solve's matrix, right-hand side and result; and ridge r in place of upstream's identity."""
    seen = {"z": [], "solves": []}
    pending = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: pending.append(out.detach().clone()))
             for m in editor.lifelong_normalizer.values()]
    solve, eye = torch.linalg.solve, torch.eye

    def recording_solve(a, b):
        x = solve(a, b)
        seen["z"].append(torch.cat(pending))
        pending.clear()
        seen["solves"].append({"A": a.detach().clone(), "B": b.detach().clone(), "X": x.detach().clone()})
        return x

    torch.linalg.solve = recording_solve
    if ridge != 1.0:
        torch.eye = lambda *a, **k: ridge * eye(*a, **k)
    try:
        yield seen
    finally:
        torch.linalg.solve, torch.eye = solve, eye
        for h in hooks:
            h.remove()


class Upstream:
    """Upstream's editor on its own copy of the model; `round` runs cache -> predict_param_shifts -> edit_model
    (its sequential_valid loop body) and returns what the comparison needs."""

    def __init__(self, up, cfg, ridge: float):
        self.up, self.cfg, self.ridge = up, cfg, ridge
        self.model = up.make_model(cfg.model)
        self.model.eval()
        self.base = {n: self.module(n).weight.detach().clone() for n in cfg.model.edit_modules}
        self.fresh()

    def module(self, name):
        m = self.model
        for part in name.split("."):
            m = getattr(m, part)
        return m

    def fresh(self):
        """A new editor (empty lifelong statistics) on the base weights."""
        for n, w in self.base.items():
            self.module(n).weight.data.copy_(w)
        self.editor = self.up.ULTRAEDIT(self.cfg, self.model)
        self.up.empty_cache(self.cfg.editor.cache_dir, self.cfg)

    def round(self, tuples) -> dict:
        self.editor.cache(tuples["edit_tuples"])
        norm = next(iter(self.editor.lifelong_normalizer.values()))
        stats = {"n": float(norm.n), "mean": norm.mean.detach().clone(), "std": norm.std.detach().clone(),
                 "var": norm.var.detach().clone()}
        c = self.cfg
        folder = Path(c.editor.cache_dir) / (f"{c.model.name}_{c.dataset.name}_{c.editor.name}_"
                                             f"{c.dataset.n_edits}_{c.num_seq}")
        batches = math.ceil(c.dataset.n_edits / c.dataset.batch_size)
        rows = {i: (torch.cat([torch.load(folder / f"{i}_{b}_keys.pth") for b in range(batches)]),
                    torch.cat([torch.load(folder / f"{i}_{b}_values_grad.pth") for b in range(batches)]))
                for i in range(len(c.model.edit_modules))}
        with watched(self.editor, self.ridge) as seen:
            shifts = self.editor.predict_param_shifts()
        self.editor.edit_model(shifts, False)
        return {"stats": stats, "rows": rows, "seen": seen, "shifts": shifts}

    def delta(self, lm) -> dict:
        """The accumulated edit as an editkit WeightDelta (parameter name -> W_now - W_base)."""
        return {n + ".weight": (self.module(n).weight.detach() - w).clone() for n, w in self.base.items()}


# --- measurement ---------------------------------------------------------------------------------------------------
def kept(pre: dict, post: dict) -> tuple[float, float]:
    """(kept, kept_correct) of one record's neighbourhood prompts against the unedited model."""
    g0, g1 = pre["neighborhood"], post["neighborhood"]
    if not g0["nll_true"]:
        return math.nan, math.nan
    before = [t < n for n, t in zip(g0["nll_new"], g0["nll_true"])]
    after = [t < n for n, t in zip(g1["nll_new"], g1["nll_true"])]
    same = sum(a == b for a, b in zip(before, after)) / len(before)
    right = [a for a, b in zip(after, before) if b]
    return same, (sum(right) / len(right) if right else math.nan)


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# --- compare --------------------------------------------------------------------------------------------------------
def align(k_up: torch.Tensor, k_ek: torch.Tensor) -> torch.Tensor:
    """For each of upstream's rows, the editkit row with the nearest key (upstream sorts requests by length)."""
    d = torch.cdist(k_up.double(), k_ek.double())
    idx = d.argmin(1)
    if len(set(idx.tolist())) != len(idx):
        raise SystemExit("rows could not be matched one to one")
    return idx


def upstream_merge(state: dict | None, rows_per_batch: list, width: int) -> RunningStats:
    """editkit's rows through upstream's RunningMeanStd.update, float32 (one update per forward batch and layer,
    each adding n x the batch's unbiased variance), as a RunningStats whose std equals upstream's."""
    n = torch.zeros(1) if state is None else state["n"]
    mean = torch.zeros(width) if state is None else state["mean"].clone()
    var = torch.zeros(width) if state is None else state["var"].clone()
    for x in rows_per_batch:
        x = x.float()
        m = n + x.shape[0]
        d = x.mean(0) - mean
        mean = mean + x.shape[0] * d / m
        var = var + x.shape[0] * x.var(0) + n * x.shape[0] * d.pow(2) / m
        n = m
    return RunningStats(int(n.item()), mean.double(), var.double()), {"n": n, "mean": mean, "var": var}


def compare(args, lm, up) -> dict:
    records = load_eval_set(args.set, args.start + args.n * args.rounds)[args.start:]
    hp = load_hparams("ultraedit", lm, overrides(args))
    folder = shipped_folder(args.model)
    work = Path(args.work)
    cfg = upstream_config(folder, hp.layers, hp.lr, args.n, args.rounds, work)
    ref = Upstream(up, cfg, hp.ridge)
    rounds = upstream_rounds(up, cfg, records, ref.editor.tok)
    total, state, merged, out = {}, None, None, {"hparams": hp.to_dict(), "rounds": []}
    pres = [measure(lm, r, 0, 0, 0) for r in records]
    for k, tuples in enumerate(rounds):
        chunk = records[k * args.n:(k + 1) * args.n]
        with applied(lm, total):
            res = run_edit(lm, "ultraedit", [r.request for r in chunk], hp, solves=True, state=state)
        got = ref.round(tuples)
        layers = []
        # upstream's update order: per forward batch, per layer; editkit's rows of the same forward batch
        fwd = []
        for t in tuples["edit_tuples"]:
            nb = int((t["labels"] != -100).sum())
            fwd.append(nb)
        for i, s in enumerate(res.solves):
            k_up, g_up = got["rows"][i]
            idx = align(k_up, s.keys)
            z_up = got["seen"]["z"][i][:len(k_up)]
            kh, gh = z_up[:, :k_up.shape[1]], z_up[:, k_up.shape[1]:]
            v_up = -hp.lr * (kh * kh).sum(-1, keepdim=True) * gh
            sol = got["seen"]["solves"][i]
            layers.append({
                "layer": s.layer, "rows": len(k_up),
                "keys": rel(k_up, s.keys[idx]), "gradients": rel(g_up, s.gradients[idx]),
                "mean": rel(got["stats"]["mean"], s.stats.mean), "std": rel(got["stats"]["std"], s.stats.std),
                "k_hat": rel(kh, s.k_hat[idx]), "g_hat": rel(gh, s.g_hat[idx]),
                "values": rel(v_up, s.values[idx]), "values_norm_ratio": float(v_up.norm() / s.values.norm()),
                "rhs_check": rel(k_up.T @ v_up, sol["B"]),
                "delta": rel(got["shifts"][cfg.model.edit_modules[i]].T, s.delta),
                "delta_norm_ratio": float(got["shifts"][cfg.model.edit_modules[i]].norm() / s.delta.norm())})
        # editkit's own rows through upstream's float32 variance update, then editkit's float64 solve
        per_batch, start = [], 0
        for nb in fwd:
            per_batch.append(slice(start, start + nb))
            start += nb
        order = [align(got["rows"][i][0], s.keys) for i, s in enumerate(res.solves)]
        batches = [torch.cat([s.keys[order[i][sl]], s.gradients[order[i][sl]]], 1).float()
                   for sl in per_batch for i, s in enumerate(res.solves)]
        width = batches[0].shape[1]
        stats_up, merged = upstream_merge(merged, batches, width)
        for i, s in enumerate(res.solves):
            again = ultraedit_update(s.keys, s.gradients, stats_up, hp.lr, hp.ridge)
            layers[i]["std_with_upstream_merge"] = rel(got["stats"]["std"], stats_up.std)
            layers[i]["delta_with_upstream_merge"] = rel(got["shifts"][cfg.model.edit_modules[i]].T, again["delta"])
        total = combined([total, res.delta]) if total else dict(res.delta)
        state = res.state
        probs = []
        seen = records[:(k + 1) * args.n]
        with applied(lm, total):
            post_ek = [measure(lm, r, 0, 0, 0) for r in seen]
        with applied(lm, ref.delta(lm)):
            post_up = [measure(lm, r, 0, 0, 0) for r in seen]
        for r, p, e, u in zip(seen, pres, post_ek, post_up):
            probs.append({"case_id": r.request.case_id, **{
                f"{g}_{w}_{t}": [round(x, 4) for x in m[g][f"p_{t}"]]
                for g in ("rewrite", "paraphrase", "neighborhood") for w, m in (("pre", p), ("ek", e), ("up", u))
                for t in ("new", "true")}})
        out["rounds"].append({"round": k + 1, "upstream_normalizer_n": got["stats"]["n"],
                              "effect": effect(pres, post_ek, post_up), "reach": reach(lm, chunk, res.solves),
                              "editkit_normalizer_n": res.solves[0].stats.n, "layers": layers,
                              "probabilities": probs,
                              "prob_rel_diff": prob_diff(post_ek, post_up)})
    return out


def effect(pre: list, ek: list, up: list) -> dict:
    """Mean P(new) on rewrite and paraphrase prompts and mean P(true) / P(new) on neighbourhood prompts, before and
    after each side's edit, and the neighbourhood comparisons P(true) > P(new) that each side left as before."""
    def mean(ms, g, t):
        v = [x for m in ms for x in m[g][f"p_{t}"]]
        return round(sum(v) / len(v), 4) if v else None
    out = {f"{g}_p_{t}": {w: mean(ms, g, t) for w, ms in (("pre", pre), ("editkit", ek), ("upstream", up))}
           for g, t in (("rewrite", "new"), ("paraphrase", "new"), ("neighborhood", "true"), ("neighborhood", "new"))}
    for w, ms in (("editkit", ek), ("upstream", up)):
        pairs = [(kept(p, q)) for p, q in zip(pre, ms)]
        out[f"kept_{w}"] = round(sum(a for a, _ in pairs if not math.isnan(a)) / len(pairs), 3)
    return out


def last_keys(lm, prompts: list[str], layers) -> dict:
    """Each layer's down-projection input at each prompt's last token (what an edit there multiplies), (n, d_ff)."""
    out = {l: [] for l in layers}
    for p in prompts:
        ids = torch.tensor([lm.tok(p, add_special_tokens=True)["input_ids"]], device=lm.device)
        with torch.no_grad():
            got = lm.runner.read({f"k{l}": Site("mlp_key", l) for l in layers}, input_ids=ids)
        for l in layers:
            out[l].append(got[f"k{l}"][0, -1].double().cpu())
    return {l: torch.stack(v) for l, v in out.items()}


def reach(lm, records, solves) -> dict:
    """How much of an edit reaches other prompts, per layer: ||Delta k|| at the last token of the paraphrase and the
    neighbourhood prompts over ||Delta k|| at the rewrite prompts' last tokens (1: the prompt gets the full write),
    and the cosine of each such key with its own rewrite prompt's key."""
    layers = [s.layer for s in solves]
    groups = {"rewrite": [r.request.rewrite for r in records],
              "paraphrase": [(r.request.paraphrase_prompts or [None])[0] for r in records],
              "neighborhood": [(r.request.neighborhood_prompts or [None])[0] for r in records]}
    keep = [i for i in range(len(records)) if groups["paraphrase"][i] and groups["neighborhood"][i]]
    keys = {g: last_keys(lm, [ps[i] for i in keep], layers) for g, ps in groups.items()}
    out = {}
    for s in solves:
        write = {g: (k[s.layer] @ s.delta.T).norm(dim=1) for g, k in keys.items()}
        cos = {g: torch.nn.functional.cosine_similarity(keys[g][s.layer], keys["rewrite"][s.layer]).mean()
               for g in ("paraphrase", "neighborhood")}
        out[s.layer] = {**{f"write_{g}": round(float(write[g].mean() / write["rewrite"].mean()), 3)
                           for g in ("paraphrase", "neighborhood")},
                        **{f"cosine_{g}": round(float(c), 3) for g, c in cos.items()}}
    return out


def prob_diff(a: list, b: list) -> dict:
    """Largest |P_editkit - P_upstream| per prompt group over records (new and true targets)."""
    out = {}
    for g in ("rewrite", "paraphrase", "neighborhood"):
        d = [abs(x - y) for p, q in zip(a, b) for t in ("new", "true") for x, y in zip(p[g][f"p_{t}"], q[g][f"p_{t}"])]
        out[g] = max(d) if d else None
    return out


# --- evaluate -------------------------------------------------------------------------------------------------------
def evaluate(args, lm, up) -> dict:
    records = load_eval_set(args.set, args.n)
    hp = load_hparams("ultraedit", lm, overrides(args))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha1(json.dumps([lm.name, args.set, args.n, args.batch,
                                   [r.request.case_id for r in records]]).encode()).hexdigest()[:10]
    pre_file = out_dir / f"pre-{key}.json"
    if not pre_file.exists():
        pre_file.write_text(json.dumps(rates(lm, records)))
    before = json.loads(pre_file.read_text())
    original = [b["answers"] for b in before]
    result = {"hparams": hp.to_dict(), "n": len(records), "batch": args.batch, "runs": {}}
    batches = [records[i:i + args.batch] for i in range(0, len(records), args.batch)]
    ref = None
    for impl in args.impls.split(","):
        for mode in args.modes.split(","):
            tag = impl if impl == "editkit" or args.token == "ans" else f"{impl}-token-{args.token}"
            hkey = hashlib.sha1(json.dumps([key, tag, mode, hp.to_dict()], sort_keys=True).encode()).hexdigest()[:10]
            path = out_dir / f"{tag}-{mode}-{hkey}.json"
            if path.exists():
                result["runs"][f"{tag}/{mode}"] = json.loads(path.read_text())["summary"]
                continue
            if impl == "upstream" and ref is None:
                cfg = upstream_config(shipped_folder(args.model), hp.layers, hp.lr, args.batch, len(batches),
                                      Path(args.work), args.token)
                ref = Upstream(up, cfg, hp.ridge)
                rounds = upstream_rounds(up, cfg, records, ref.editor.tok)
            after, seconds, t0 = [], [], time.perf_counter()
            total, state = {}, None
            for b, chunk in enumerate(batches):
                t = time.perf_counter()
                if impl == "editkit":
                    with applied(lm, total if mode == "sequence" else {}):
                        res = run_edit(lm, "ultraedit", [r.request for r in chunk], hp,
                                       state=state if mode == "sequence" else None)
                    delta = res.delta
                    if mode == "sequence":
                        total, state = (combined([total, delta]) if total else dict(delta)), res.state
                else:
                    if mode == "single" or b == 0:
                        ref.fresh()
                    ref.round(rounds[b])
                    delta = total = ref.delta(lm)
                seconds.append((time.perf_counter() - t) / len(chunk))
                if mode == "single":
                    with applied(lm, delta):
                        after += rates(lm, chunk, original=original[b * args.batch:(b + 1) * args.batch])
                print(f"{tag} {mode} batch {b + 1}/{len(batches)} ({time.perf_counter() - t0:.0f} s)", flush=True)
            if mode == "sequence":
                with applied(lm, total):
                    after = rates(lm, records, original=original)
            summ = {**summary(before, after), "seconds_per_request": sum(seconds) / len(seconds)}
            path.write_text(json.dumps({"summary": summ, "after": after, "hparams": hp.to_dict()}))
            result["runs"][f"{tag}/{mode}"] = summ
    return result


def overrides(args) -> dict:
    o = {}
    if args.layers:
        o["layers"] = [int(x) for x in args.layers.split(",")]
    if args.lr is not None:
        o["lr"] = args.lr
    if args.ridge is not None:
        o["ridge"] = args.ridge
    return o


def table(result: dict) -> str:
    keys = [("efficacy", "efficacy"), ("generalization", "generalization"),
            ("unedited_specificity", "specificity before"), ("specificity", "specificity after"),
            ("change_specificity", "paired change"), ("kept", "kept"), ("kept_correct", "kept correct"),
            ("locality", "locality")]
    lines = ["| run | " + " | ".join(n for _, n in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, s in result["runs"].items():
        lines.append(f"| {name} | " + " | ".join(cell(s.get(k)) for k, _ in keys) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["compare", "evaluate"])
    p.add_argument("--upstream", default=DEFAULT_UPSTREAM, help="checkout of XiaojieGu/UltraEdit")
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--set", default="counterfact-val")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1, help="compare: rounds of --n requests, one after another")
    p.add_argument("--batch", type=int, default=10, help="evaluate: requests per edit")
    p.add_argument("--modes", default="single,sequence")
    p.add_argument("--impls", default="editkit,upstream")
    p.add_argument("--greedy-tokens", type=int, default=0)
    p.add_argument("--token", choices=["ans", "mask"], default="ans",
                   help="evaluate: upstream's `token` (ans: its default, the answer tokens; mask: every token, the "
                        "default of EasyEdit's port)")
    p.add_argument("--layers", default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--ridge", type=float, default=None)
    p.add_argument("--work", default="/work/scratch/ultra/upstream-cache", help="upstream's key/gradient cache")
    p.add_argument("--out", default=None)
    p.add_argument("--out-dir", default="/work/scratch/ultra/eval")
    args = p.parse_args()
    if args.what == "compare" and args.token != "ans":
        raise SystemExit("compare matches upstream's rows to editkit's, which reads the answer tokens: --token ans")
    lm = load_model(args.model)
    up = import_upstream(args.upstream)
    result = compare(args, lm, up) if args.what == "compare" else evaluate(args, lm, up)
    text = json.dumps(result, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text)
    if args.what == "evaluate":
        print(table(result))
    else:
        for r in result["rounds"]:
            print(json.dumps({k: v for k, v in r.items() if k != "probabilities"}, indent=1))


if __name__ == "__main__":
    main()
