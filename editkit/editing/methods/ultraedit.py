"""UltraEdit (Gu et al. 2025, arXiv 2505.14679; code XiaojieGu/UltraEdit): lifelong editing with no covariance
statistics, no subject and no memory module. Each round is one closed-form ridge solve per edited FFN output
projection from the keys and the cross-entropy's gradients at the target tokens, normalised with running
statistics carried from round to round (the math: below, then the method's hyperparameters and `apply`).

The running statistics are this method's sequence state (editing/sequence.py): a SequenceState whose tensors are
"stats.<group>.n / .mean / .m2" per statistics group, so a lifelong run (evaluation/sequential.py) carries them
from batch to batch and a checkpoint resumes them. A single edit starts from empty statistics: its own rows are
all it normalises with. Groups: upstream keeps one normaliser per module *shape* (all edited down-projections of
a model share one); `normalizer: "module"` keeps one per edited layer instead.

The result (editing/result.py): per edited down-projection a ParameterNorm and a LayerReport (its "residual_norm"
is the mean ||v|| of the pseudo-values the layer was asked to write), per request a RequestReport with no
optimisation steps (the NLL and P(target) at which the gradients were taken are in its details), and with
`solves=True` a RidgeSolve per layer: K, G, k_hat, g_hat, V, the statistics and Delta, so the normal equations and
the predicted output change K Delta can be checked. First use: nothing (no covariance, no templates).

Upstream's hyperparameters (config/editor/ultraedit.yaml): lr 1e-6, `token: ans`, 100 edits per round in forward
batches of 10 (config/dataset/*.yaml); the edited modules per model in config/model/*.yaml (e.g. GPT-J's fc_out of
layers 18-26 of 28, Mistral-7B's down_proj of layers 29-30 of 32). editkit edits the down-projections (the maps
its adapters edit); the choice of layers and lr per model is in assets/hparams/README.md.

One edit round, for each edited linear map W (y = W k in math layout, d_out x d_in):
1. Keys and value gradients (`keys_and_gradients`): run the edit prompts with the new target as labels; at every
   position whose logits predict a target token (upstream `token: ans`), keep the map's input k (d_in) and the
   gradient g = dL/dy of the cross-entropy L (mean over those positions) w.r.t. its output (d_out).
2. Lifelong normalisation (`RunningStats`): z = [k, g] is standardised with a running mean and standard deviation
   that are updated with this round's rows before use and never reset (upstream `RunningMeanStd`, one per module
   shape): z_hat = (z - mean) / (std + eps), split back into k_hat and g_hat.
3. Pseudo-values (`pseudo_values`): v = -lr * ||k_hat||^2 * g_hat, one per row (upstream's `coeffs` times its
   normalised gradients): a gradient step on the output, its size set by how far the key is from the usual ones.
4. The ridge solve (`ridge_solve`): with K (n, d_in) the raw keys and V (n, d_out) the pseudo-values of all rows of
   the round, Delta = (K^T K + I)^-1 K^T V (d_in, d_out), added to the weight in the y = k Delta layout (upstream
   transposes it for nn.Linear), i.e. W += Delta^T in math layout. It minimises ||K Delta - V||^2 + ||Delta||^2:
   the edited map writes (about) v at each key, and as little else as it can.

Where editkit differs from upstream's code:
- The running variance is the exact parallel merge (Chan et al. 1979), which is the paper's update
  s^2 <- s^2 + n Var(z) + N n / (N + n) delta^2, N <- N + n, with Var the batch's own (population) variance.
  Upstream's code adds n * x.var(0), torch's unbiased variance, i.e. M2_b * n / (n - 1): it overcounts each batch's
  spread by 1 / (n - 1) and is NaN for a one-row batch. With the exact merge the running statistics equal those of
  all rows seen so far, whatever the split into rounds.
- Statistics and solves are in float64 (upstream: float32 statistics, a float32 d_in x d_in solve).
- The solve uses the n x n form K^T (K K^T + I)^-1 V when a round has fewer rows than d_in (the same matrix, by the
  push-through identity), so a 10-request round on a d_ff = 2048 map solves a ~30 x 30 system.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...core.errors import EditkitError
from ...core.settings import limits
from ...model.scoring import target_ids
from ...model.sites import Site
from ...model.tokens import pad_right
from ..hparams import BaseHparams, _positive
from ..result import EditResult, LayerReport, RequestReport, Solve, norm_report
from ..sequence import SequenceState
from . import Method, nothing, register

EPS = torch.finfo(torch.float32).eps  # upstream's eps (its statistics are float32)


# --- lifelong normalisation --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunningStats:
    """Count, mean and sum of squared deviations (M2) of every row seen so far, per column, float64."""

    n: int
    mean: torch.Tensor  # (d,)
    m2: torch.Tensor  # (d,)

    @classmethod
    def empty(cls, width: int) -> "RunningStats":
        z = torch.zeros(width, dtype=torch.float64)
        return cls(0, z, z.clone())

    def merged(self, x: torch.Tensor) -> "RunningStats":
        """These statistics updated with rows x (m, d): the parallel-variance merge of (n, mean, M2) with the
        batch's own (m, mean_b, M2_b):  mean' = mean + (mean_b - mean) m / n',
        M2' = M2 + M2_b + (mean_b - mean)^2 n m / n',  n' = n + m."""
        x = x.detach().to(torch.float64).cpu()
        if x.dim() != 2 or x.shape[1] != self.mean.shape[0]:
            raise EditkitError(f"rows of width {self.mean.shape[0]} expected, not {tuple(x.shape)}")
        m = x.shape[0]
        if m == 0:
            return self
        mean_b = x.mean(0)
        m2_b = ((x - mean_b) ** 2).sum(0)
        n = self.n + m
        delta = mean_b - self.mean
        return RunningStats(n, self.mean + delta * (m / n), self.m2 + m2_b + delta ** 2 * (self.n * m / n))

    @property
    def std(self) -> torch.Tensor:
        """The unbiased standard deviation, sqrt(M2 / (n - 1)) (upstream: var / (n - 1 + eps))."""
        return (self.m2 / (self.n - 1 + EPS)).sqrt()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / (std + eps), float64 (upstream `RunningMeanStd.forward`)."""
        return (x.to(torch.float64).cpu() - self.mean) / (self.std + EPS)


# --- the update --------------------------------------------------------------------------------------------------
def pseudo_values(k_hat: torch.Tensor, g_hat: torch.Tensor, lr: float) -> torch.Tensor:
    """v = -lr * ||k_hat||^2 * g_hat per row (n, d_out)."""
    return -lr * (k_hat * k_hat).sum(-1, keepdim=True) * g_hat


def ridge_solve(K: torch.Tensor, V: torch.Tensor, ridge: float = 1.0) -> torch.Tensor:
    """Delta = (K^T K + ridge I)^-1 K^T V, (d_in, d_out), float64, for keys K (n, d_in) and values V (n, d_out)
    (upstream: ridge 1). With fewer rows than columns, the equal K^T (K K^T + ridge I)^-1 V (an n x n system)."""
    K64, V64 = K.to(torch.float64), V.to(torch.float64).to(K.device)
    n, d = K64.shape
    if n < d:
        G = K64 @ K64.T + ridge * torch.eye(n, dtype=torch.float64, device=K64.device)
        L, info = torch.linalg.cholesky_ex(G)
        return K64.T @ (torch.cholesky_solve(V64, L) if int(info) == 0 else torch.linalg.solve(G, V64))
    A = K64.T @ K64 + ridge * torch.eye(d, dtype=torch.float64, device=K64.device)
    return torch.linalg.solve(A, K64.T @ V64)


def ultraedit_update(K: torch.Tensor, G: torch.Tensor, stats: RunningStats, lr: float, ridge: float = 1.0) -> dict:
    """One module's update from its keys K (n, d_in) and value gradients G (n, d_out), with `stats` the running
    statistics of [k, g] already updated with these rows. Returns {"delta": Delta^T (d_out, d_in), math layout,
    float64; "k_hat", "g_hat", "values": V}."""
    d_in = K.shape[1]
    z_hat = stats.normalize(torch.cat([K.to(torch.float64).cpu(), G.to(torch.float64).cpu()], 1))
    k_hat, g_hat = z_hat[:, :d_in], z_hat[:, d_in:]
    V = pseudo_values(k_hat, g_hat, lr)
    delta = ridge_solve(K.to(torch.float64).cpu(), V, ridge)
    return {"delta": delta.T.contiguous(), "k_hat": k_hat, "g_hat": g_hat, "values": V}


# --- keys and gradients at the answer tokens ---------------------------------------------------------------------
def answer_batch(lm, prompts: list[str], targets: list[str]) -> dict:
    """Token rows prompt + target[:-1] (right-padded) and, per target token, its (row, position, token id): the
    positions whose logits predict the target (upstream's labels != -100 after the shift)."""
    tok = lm.tok
    limit = min(lm.adapter.max_length, limits().prompt_tokens)
    rows, where_row, where_pos, label = [], [], [], []
    for i, (prompt, target) in enumerate(zip(prompts, targets)):
        p_ids = tok(prompt, add_special_tokens=True)["input_ids"]
        t_ids = target_ids(tok, target)
        if len(p_ids) + len(t_ids) > limit:
            raise EditkitError(f"the prompt {prompt[:40]!r}... with its target has {len(p_ids) + len(t_ids)} "
                               f"tokens; the limit is {limit}")
        rows.append(p_ids + t_ids[:-1])
        for m, t in enumerate(t_ids):
            where_row.append(i)
            where_pos.append(len(p_ids) - 1 + m)
            label.append(t)
    dev = lm.device
    ids, mask = pad_right(rows, tok.pad_token_id if tok.pad_token_id is not None else 0, dev)
    return {"input_ids": ids, "attention_mask": mask, "row": torch.tensor(where_row, device=dev),
            "pos": torch.tensor(where_pos, device=dev), "label": torch.tensor(label, device=dev)}


def keys_and_gradients(lm, prompts: list[str], targets: list[str], layers) -> dict:
    """For each layer l: the down-projection's inputs K_l (n, d_ff) and the gradient G_l (n, d_model) of the mean
    cross-entropy of the targets w.r.t. its output, at the n target-token positions, in one forward and backward
    at the weights this context sees. A zero tensor added to each output carries the gradient (dL/dz = dL/dy with
    every path through the later layers kept). Also "nll" (n,): each target token's negative log-likelihood."""
    b = answer_batch(lm, prompts, targets)
    a = lm.adapter
    layers = list(layers)
    with torch.enable_grad():
        zeros = {}

        def edit(hooks):
            for l in layers:
                def add(y, l=l):
                    zeros[l] = torch.zeros_like(y, requires_grad=True)
                    return y + zeros[l]
                hooks.set(a.down_proj(l), add)

        got = lm.runner.read({f"key.{l}": Site("mlp_key", l) for l in layers}, full=True, edit=edit,
                             input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        logits = lm.runner.logits(got.hidden[b["row"], b["pos"]], norm=False)
        nll = torch.nn.functional.cross_entropy(logits, b["label"], reduction="none")
        grads = torch.autograd.grad(nll.mean(), [zeros[l] for l in layers])
    out = {"keys": {}, "grads": {}, "nll": nll.detach().float().cpu(), "row": b["row"].cpu()}
    for l, g in zip(layers, grads):
        out["keys"][l] = got[f"key.{l}"][b["row"], b["pos"]].detach().float()
        out["grads"][l] = g[b["row"], b["pos"]].detach().float()
    return out


NORMALIZERS = ("shape", "module")


@dataclass(frozen=True)
class UltraEditHparams(BaseHparams):
    """UltraEdit's hyperparameters. A `BaseHparams`, not an `Hparams`: it optimizes no target vectors, so it has
    none of their fields (nor any solve-only field for editing/memo.py to reuse targets across)."""

    layers: tuple[int, ...]  # edited down-projections (upstream: the FFN output projections of the last layers)
    lr: float = 1e-6  # step of the pseudo-values v = -lr ||k_hat||^2 g_hat (upstream editor.lr)
    ridge: float = 1.0  # the regulariser of the solve (K^T K + ridge I)^-1 K^T V (upstream: the identity, 1)
    forward_batch: int = 10  # requests per forward/backward; the cross-entropy is the mean over one batch's
    # target tokens (upstream dataset.batch_size)
    normalizer: str = "shape"  # running statistics per module "shape" (upstream) or per edited "module"
    source: str = ""  # where these values come from (provenance, shown to users)

    CHECKS: ClassVar[dict] = {"lr": _positive, "ridge": _positive, "forward_batch": _positive}

    def check(self) -> None:
        if self.normalizer not in NORMALIZERS:
            raise EditkitError(f"normalizer must be one of {', '.join(NORMALIZERS)}, not {self.normalizer!r}")


# --- the sequence state: running statistics per group ------------------------------------------------------------
def group_of(lm, layer: int, normalizer: str) -> str:
    """The statistics group of the down-projection at `layer`: its shape (d_in x d_out) or its layer."""
    if normalizer == "module":
        return f"down_proj.{layer}"
    d_out, d_in = lm.adapter.weight("down_proj", layer).shape
    return f"down_proj.{d_in}x{d_out}"


def stats_from_state(state: SequenceState, group: str, width: int) -> RunningStats:
    if f"stats.{group}.mean" not in state.tensors:
        return RunningStats.empty(width)
    t = state.tensors
    stats = RunningStats(int(t[f"stats.{group}.n"].item()), t[f"stats.{group}.mean"].double(),
                         t[f"stats.{group}.m2"].double())
    if stats.mean.shape[0] != width:
        raise EditkitError(f"this sequence state's statistics {group} have width {stats.mean.shape[0]}, not "
                           f"{width}: it belongs to another model")
    return stats


def state_with(state: SequenceState, stats: dict, n_requests: int, normalizer: str) -> SequenceState:
    """The next state: `stats` (group -> RunningStats) in place of the earlier ones."""
    tensors = dict(state.tensors)
    for group, s in stats.items():
        tensors[f"stats.{group}.n"] = torch.tensor([float(s.n)], dtype=torch.float64)
        tensors[f"stats.{group}.mean"] = s.mean.clone()
        tensors[f"stats.{group}.m2"] = s.m2.clone()
    meta = {**state.meta, "edits": state.edits + n_requests, "batches": int(state.meta.get("batches", 0)) + 1,
            "normalizer": normalizer}
    return SequenceState(state.method, tensors, meta)


# --- the method --------------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class RidgeSolve(Solve):
    """One layer's UltraEdit update with the inputs of its equation, float64 and row-wise (n rows = the round's
    target tokens): (K^T K + ridge I) Delta = K^T V, and `delta` (the Solve's, math layout) is Delta^T."""

    keys: torch.Tensor  # K (n, d_in): the raw keys, the down-projection's inputs at the target tokens
    gradients: torch.Tensor  # G (n, d_out): dL/dy of the mean cross-entropy at the same positions
    k_hat: torch.Tensor  # the keys normalised with the running statistics (n, d_in)
    g_hat: torch.Tensor  # the gradients normalised with them (n, d_out)
    values: torch.Tensor  # V = -lr ||k_hat||^2 g_hat (n, d_out), what the solve asks the map to write
    stats: RunningStats  # the running statistics of [k, g] after this round, as used
    group: str  # their statistics group
    ridge: float
    lr: float

    @property
    def predicted(self) -> torch.Tensor:
        """K Delta (n, d_out): the change of the map's output at the round's keys once the update is added."""
        return self.keys @ self.delta.T


def _keys_and_gradients(lm, requests, hp: UltraEditHparams, progress=None) -> tuple[dict, dict, list]:
    """K (n, d_ff) and G (n, d_model) per layer over every target token of the round, in forward batches of
    `forward_batch` requests, and per request a RequestReport with the NLL at which the gradients were taken
    (no optimisation steps: UltraEdit has no target optimisation)."""
    keys = {l: [] for l in hp.layers}
    grads = {l: [] for l in hp.layers}
    reports = []
    size = hp.forward_batch
    for c in range(0, len(requests), size):
        chunk = requests[c:c + size]
        if progress:
            progress(0.8 * c / len(requests), f"UltraEdit: gradients of requests {c + 1}-{c + len(chunk)} of "
                                              f"{len(requests)}")
        got = keys_and_gradients(lm, [r.rewrite for r in chunk], [r.target_new for r in chunk], hp.layers)
        for l in hp.layers:
            keys[l].append(got["keys"][l])
            grads[l].append(got["grads"][l])
        for j, r in enumerate(chunk):
            nll = got["nll"][got["row"] == j]
            reports.append(RequestReport(r.case_id, details={
                "tokens": len(nll), "nll_before": float(nll.mean()), "p_target_before": float(torch.exp(-nll.sum()))}))
    return ({l: torch.cat(keys[l]) for l in hp.layers}, {l: torch.cat(grads[l]) for l in hp.layers}, reports)


def _statistics(lm, state: SequenceState, K: dict, G: dict, normalizer: str) -> tuple[dict, dict]:
    """layer -> group and group -> the running statistics updated with this round's rows of all its layers (the
    rows update the statistics before they are used: upstream's `cache` precedes `predict_param_shifts`)."""
    groups = {l: group_of(lm, l, normalizer) for l in K}
    stats = {}
    for l in K:
        g = groups[l]
        if g not in stats:
            stats[g] = stats_from_state(state, g, K[l].shape[1] + G[l].shape[1])
        stats[g] = stats[g].merged(torch.cat([K[l], G[l]], 1))
    thin = sorted(g for g, s in stats.items() if s.n < 2)
    if thin:
        raise EditkitError(f"UltraEdit's normalisation needs at least two rows per statistics group; "
                           f"{', '.join(thin)} has one (a single one-token target): edit more requests at once, "
                           "edit several layers with normalizer \"shape\", or continue a sequence")
    return groups, stats


def _solve_summary(layer: int, K: torch.Tensor, up: dict) -> dict:
    """How well the ridge solve writes its values (||K Delta - V|| / ||V||) and the sizes that set them."""
    K = K.double().to(up["delta"].device)  # the keys stay where the model runs; the solve is on the CPU
    fit = (K @ up["delta"].T - up["values"]).norm() / up["values"].norm().clamp_min(1e-300)
    return {"layer": layer, "rows": K.shape[0], "key_norm": float(K.norm(dim=1).mean()),
            "key_hat_norm": float(up["k_hat"].norm(dim=1).mean()), "fit_residual": float(fit)}


def apply_ultraedit(lm, requests, hp: UltraEditHparams, progress=None, reference: bool = False,
                    solves: bool = False, state: SequenceState | None = None) -> EditResult:
    """One UltraEdit round on `requests` at the weights this context sees. `reference` has no effect (there is no
    target optimisation); `state` carries the running statistics of the earlier rounds of a sequence; `solves`
    keeps each layer's RidgeSolve."""
    start = time.perf_counter()
    state = state if state is not None else SequenceState("ultraedit")
    state.check("ultraedit")
    if state.meta.get("normalizer", hp.normalizer) != hp.normalizer:
        raise EditkitError(f"this sequence's statistics are per {state.meta['normalizer']}; keep normalizer "
                           f"{state.meta['normalizer']!r} for the whole sequence")
    a, requests = lm.adapter, list(requests)
    K, G, reports = _keys_and_gradients(lm, requests, hp, progress)
    t_gradients = time.perf_counter() - start
    groups, stats = _statistics(lm, state, K, G, hp.normalizer)
    delta, layers, kept, summaries = {}, [], [], []
    for i, l in enumerate(hp.layers):
        if progress:
            progress(0.8 + 0.2 * i / len(hp.layers), f"UltraEdit: solving layer {l}")
        up = ultraedit_update(K[l], G[l], stats[groups[l]], hp.lr, hp.ridge)
        W = a.weight("down_proj", l)
        delta.update(a.weight_delta("down_proj", l, up["delta"].to(W.device)))
        dn, wn = float(up["delta"].norm()), float(W.norm())
        layers.append(LayerReport(l, "down_proj", float(up["values"].norm(dim=1).mean()), dn, wn,
                                  dn / wn if wn else float("inf")))
        summaries.append(_solve_summary(l, K[l], up))
        if solves:
            kept.append(RidgeSolve(layer=l, part="down_proj", delta=up["delta"], keys=K[l].double().cpu(),
                                   gradients=G[l].double().cpu(), k_hat=up["k_hat"], g_hat=up["g_hat"],
                                   values=up["values"], stats=stats[groups[l]], group=groups[l], ridge=hp.ridge,
                                   lr=hp.lr))
    details = {"layers": list(hp.layers), "normalizer": hp.normalizer, "solve": summaries,
               "statistics_rows": {g: s.n for g, s in stats.items()}, "sequence_edits_before": state.edits,
               "seconds_gradients": round(t_gradients, 2)}
    if progress:
        progress(1.0, "UltraEdit done")
    return EditResult("ultraedit", requests, delta, hp, per_request=reports, layers=layers,
                      norms=norm_report(lm.model, delta), seconds=time.perf_counter() - start, details=details,
                      solves=kept, state=state_with(state, stats, len(requests), hp.normalizer))


def explain(result, i: int) -> str:
    """Why an UltraEdit edit may not win its rewrite: its learning rate, chosen to keep the neighbours."""
    hp = result.hparams
    lr = hp.get("lr") if isinstance(hp, dict) else getattr(hp, "lr", None)
    if lr is None:
        return ""
    return (f"UltraEdit's step is lr x ||k_hat||^2 g_hat, and its lr ({lr:g}) was chosen on validation "
            "to keep the neighbours, where few single rewrites win; a larger lr buys efficacy with "
            "neighbours (its operating points on Edit & compare, docs/results/ultraedit.md)")


METHOD = register(Method(
    name="ultraedit", label="UltraEdit", apply=apply_ultraedit, hparams=UltraEditHparams, order=50,
    color="#66a61e", stateful=True, first_use=nothing, placement="depth", explain=explain,
    spreading="each edited layer's own ridge solve from its keys and gradients, no statistics of text",
    about="UltraEdit (Gu et al. 2025): lifelong editing by a closed-form ridge solve per round from the target "
          "tokens' keys and gradients, normalised with running statistics kept across rounds."))
