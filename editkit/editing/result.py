"""The outcome of one edit: the weight delta (not applied) and typed diagnostics.

Every method returns the same `EditResult`, so the figures, the bleed map, the layer sweep and the benchmark read
its diagnostics without knowing which method made it:

    result.norms[name].relative_norm     ||dW||_F / ||W||_F per edited parameter
    result.norms[name].condition         cond(W + dW) with hparam report_condition (PRUNE's quantity), else None
    result.per_request[i].losses         the target optimisation, one entry per step; .steps, .p_target
    result.per_request[i].reached        how far a multi-layer edit got to the target (1 = reached; None: ROME)
    result.layers                        per layer and edited map of a multi-layer edit: ||r||, ||dW||, ||W||
    result.solves                        with run_edit(..., solves=True): each update's equation inputs, float64

`to_json()` is the JSON the CLI prints and caches (its "info" keeps the keys it always had); `from_json` reads the
diagnostics back (not the delta: save that with `weights.save_patch`). In a notebook an EditResult shows its
per-request table; `figure()` draws the target optimisation's loss and the relative weight change.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..core.results import JsonObject, Result, frame
from ..figures.editing import edit_figure
from ..model import weights
from .requests import EditRequest, parse_record

if TYPE_CHECKING:
    import pandas as pd

    from ..model.lm import LM
    from .hparams import BaseHparams
    from .sequence import SequenceState


@dataclass(frozen=True)
class ParameterNorm:
    delta_norm: float  # ||dW||_F
    weight_norm: float  # ||W||_F of the base weight
    relative_norm: float  # their ratio (inf for a zero weight)
    condition: float | None = None  # cond_2(W + dW) = sigma_max / sigma_min (PRUNE's quantity); None: not asked

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.condition is None:
            d.pop("condition")
        return d


def condition_number(matrix: torch.Tensor) -> float:
    """The 2-norm condition number sigma_max / sigma_min of a matrix (any shape; the min(m, n) singular values),
    in float64: what PRUNE (Ma et al., ICLR 2025) bounds to keep sequential edits from disturbing the model. Equals
    torch.linalg.cond(matrix); inf for a rank-deficient one. About 0.1 s for a 640 x 2048 matrix on a CPU."""
    s = torch.linalg.svdvals(matrix.detach().double())
    return float(s[0] / s[-1]) if float(s[-1]) > 0 else float("inf")


def norm_report(model: torch.nn.Module, delta: weights.WeightDelta,
                condition: bool = False) -> dict[str, ParameterNorm]:
    """||dW||_F, ||W||_F and their ratio per edited parameter; with `condition` also cond(W + dW) (W the base
    weight, as for the norms; off by default: it costs a singular value decomposition per parameter)."""
    params = dict(model.named_parameters())
    out = {}
    for name, d in delta.items():
        base = params[name].detach()
        w = float(base.norm())
        dn = float(d.norm())
        cond = condition_number(base + d.to(base.dtype)) if condition else None
        out[name] = ParameterNorm(dn, w, dn / w if w else float("inf"), cond)
    return out


@dataclass
class RequestReport:
    """One request's diagnostics."""

    case_id: object = None
    # per optimisation step: step, loss, nll, kl, p_target
    losses: list[dict[str, float]] = field(default_factory=list)
    reached: float | None = None  # share of the distance to the target the edited model covers at the target site
    # (1 = reached), for multi-layer edits, which can fall short; None where the method does not measure it
    details: dict[str, Any] = field(default_factory=dict)  # the method's own numbers for this request

    @property
    def steps(self) -> int:
        """Optimisation steps taken (0 for a method without a target optimisation)."""
        return len(self.losses)

    @property
    def p_target(self) -> float | None:
        """P(target_new) at the optimisation's last step: whether the target vector reached the new answer."""
        return self.losses[-1].get("p_target") if self.losses else None

    def to_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, **self.details, "losses": self.losses}


@dataclass(frozen=True)
class LayerReport:
    """One edited map at one layer of a multi-layer edit (editing/spread.py)."""

    layer: int
    part: str  # the adapter's linear part: "down_proj", "o_proj"
    residual_norm: float  # mean ||r|| over the requests of what this layer was asked to write
    delta_norm: float
    weight_norm: float
    relative_norm: float


@dataclass(kw_only=True)
class Solve:
    """One update as a method solved it, for checks and predictions: the layer and map, the float64 update in math
    layout (d_out, d_in) and the statistics C it used. Methods extend it with the inputs of their own equation
    (spread.LeastSquaresSolve, rome.RankOneSolve, alphaedit.NullSpaceSolve). Kept only with run_edit(...,
    solves=True): C is d_in x d_in per layer."""

    layer: int
    part: str
    delta: torch.Tensor
    C: torch.Tensor | None = None


@dataclass(frozen=True)
class Diagnostic:
    """What a user must read beside an edit's numbers: what went wrong for a request (or the whole
    edit) and the likely reason, in a sentence each; `hint` names what to change (a setting, a request
    field)."""

    kind: str  # "rewrite_failed": the edit does not win its own rewrite prompt; "nothing_implied":
    # co-edit wrote no implied fact for the request (it edited it as MEMIT would)
    message: str
    request: int | None = None  # the request's index in the edit; None: the whole edit
    hint: str = ""

    def __str__(self) -> str:
        return self.message + (f" {self.hint}" if self.hint else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def likely_reason(result: "EditResult", i: int) -> str:
    """Why request i's edit may not win its rewrite, from the result's own diagnostics (any method's:
    the target held at its bound, a target optimisation that ended short of the new answer, a spread
    that did not reach its target); a method that knows better says so through its `explain` hook."""
    from .methods import get

    own = get(result.method).explain
    if own is not None:
        reason = own(result, i)
        if reason:
            return reason
    r = result.per_request[i] if i < len(result.per_request) else RequestReport()
    if r.details.get("held_at_bound"):
        return "its target was held at the shift bound v_max_norm before it reached the new answer"
    if r.p_target is not None and r.p_target < 0.5:
        return (f"its target optimisation ended at P(new) {r.p_target:.2f} after {r.steps} step(s) "
                "(v_num_grad_steps and v_lr set how far it goes)")
    if r.reached is not None and r.reached < 0.8:
        return (f"the update reached {100 * r.reached:.0f}% of its target at the edited layers (the "
                "statistics C of other keys hold it back: mom2_update_weight)")
    return ("its target was reached where it was written, yet the rewrite prompt's answer is decided "
            "elsewhere in the model (another layer or token than the edited ones)")


# info keys EditResult.info builds from typed fields; any other key of a read-back "info" is the method's details
_BUILT = ("requests", "target_reached", "seconds_targets", "seconds_spread", "norms", "hparams",
          "diagnostics")


@dataclass
class EditResult(Result):
    """One edit (any method): the weight change `delta` (parameter name -> tensor, never applied to the model) and
    its typed diagnostics (module docstring). `with result.applied(lm): ...` computes with the edited weights."""

    method: str
    requests: list[EditRequest]
    delta: weights.WeightDelta = field(repr=False)  # parameter name -> delta, in the parameter's layout
    hparams: BaseHparams | dict[str, Any] | None = None  # the method's Hparams (their JSON when read back)
    per_request: list[RequestReport] = field(default_factory=list)  # one per request, in order
    layers: list[LayerReport] = field(default_factory=list)  # multi-layer edits, by layer and map
    norms: dict[str, ParameterNorm] = field(default_factory=dict)  # per edited parameter
    seconds: float = 0.0
    seconds_targets: float | None = None  # of `seconds`, the target optimisation
    seconds_spread: float | None = None  # of `seconds`, a multi-layer edit's spreading
    details: dict[str, Any] = field(default_factory=dict)  # the method's own JSON numbers (ROME: layer, ...)
    solves: list[Solve] = field(default_factory=list, repr=False)  # with solves=True
    # a stateful method's next SequenceState (editing/sequence.py)
    state: SequenceState | None = field(default=None, repr=False)
    shapes: dict[str, list[int]] | None = None  # parameter -> shape, for a result read from JSON (no delta)
    diagnostics: list[Diagnostic] = field(default_factory=list)  # what to read beside the numbers

    _show = "table"

    @contextmanager
    def applied(self, lm: LM) -> Iterator[LM]:
        """A block whose computations (in this thread) see the edited weights W + delta; the model is unchanged."""
        with weights.applied(lm, self.delta):
            yield lm

    @property
    def relative_norm(self) -> float:
        """The largest ||dW||_F / ||W||_F over the edited parameters."""
        return max((n.relative_norm for n in self.norms.values()), default=0.0)

    def headline(self) -> str:
        held = [r.details["held_at_bound"] for r in self.per_request if "held_at_bound" in r.details]
        bound = f"; {sum(held)} of {len(held)} target(s) held at the shift bound v_max_norm" if any(held) else ""
        notes = "".join(f"\n{d}" for d in self.diagnostics)
        return (f"{self.method}, {len(self.requests)} request(s) in {self.seconds:.1f} s; "
                f"{len(self.norms)} parameter(s) changed, max ||dW||/||W|| = {self.relative_norm:.4f}"
                f"{bound}{notes}")

    def check_rewrites(self, post: list[dict[str, Any]]) -> list[Diagnostic]:
        """Given each request's probabilities after the edit (measure.probabilities: group ->
        [{"p_new", "p_true"}]), note every request whose rewrite prompt the edit does not win
        (P(new) <= P(true)), with its likely reason; they replace earlier such notes and are returned."""
        self.diagnostics = [d for d in self.diagnostics if d.kind != "rewrite_failed"]
        new = []
        for i, (q, p) in enumerate(zip(self.requests, post)):
            rw = (p.get("rewrite") or [{}])[0]
            if rw.get("p_true") is None or rw["p_new"] > rw["p_true"]:
                continue
            new_, true = q.target_new.strip(), (q.target_true or "").strip()
            new.append(Diagnostic(
                "rewrite_failed", f"The edit does not win its own rewrite: after {q.rewrite!r}, "
                f"P({new_}) {rw['p_new']:.3f} is not above P({true}) {rw['p_true']:.3f}; likely reason: "
                f"{likely_reason(self, i)}.", i))
        self.diagnostics += new
        return new

    @property
    def info(self) -> dict[str, Any]:
        """The diagnostics as JSON (to_dict()["info"])."""
        info = dict(self.details)
        info["requests"] = [r.to_dict() for r in self.per_request]
        if self.layers:
            info["per_layer"] = _per_layer(self.layers)
        if any(r.reached is not None for r in self.per_request):
            info["target_reached"] = [None if r.reached is None else round(r.reached, 4) for r in self.per_request]
        if self.seconds_targets is not None:
            info["seconds_targets"] = round(self.seconds_targets, 2)
        if self.seconds_spread is not None:
            info["seconds_spread"] = round(self.seconds_spread, 2)
        info["norms"] = {k: v.to_dict() for k, v in self.norms.items()}
        if self.diagnostics:
            info["diagnostics"] = [d.to_dict() for d in self.diagnostics]
        if self.hparams is not None:  # a result read from JSON keeps its hyperparameters as their JSON
            info["hparams"] = self.hparams if isinstance(self.hparams, dict) else self.hparams.to_dict()
        return info

    def to_json(self) -> JsonObject:
        shapes = self.shapes if self.shapes is not None else {k: list(v.shape) for k, v in self.delta.items()}
        return {"method": self.method, "requests": [r.to_dict() for r in self.requests], "info": self.info,
                "seconds": round(self.seconds, 3), "parameters": shapes}

    @classmethod
    def _from_json(cls, d: JsonObject) -> EditResult:
        """The diagnostics of to_json() (the delta is not in the JSON; the hyperparameters stay a dict)."""
        info = d["info"]
        reached = info.get("target_reached") or [None] * len(info["requests"])
        per_request = [RequestReport(q.get("case_id"), q["losses"], r,
                                     {k: v for k, v in q.items() if k not in ("case_id", "losses")})
                       for q, r in zip(info["requests"], reached)]
        return cls(d["method"], [parse_record(r) for r in d["requests"]], {}, info.get("hparams"), per_request,
                   norms={k: ParameterNorm(**v) for k, v in info.get("norms", {}).items()}, seconds=d["seconds"],
                   seconds_targets=info.get("seconds_targets"), seconds_spread=info.get("seconds_spread"),
                   details={k: v for k, v in info.items() if k not in _BUILT}, shapes=d.get("parameters", {}),
                   diagnostics=[Diagnostic(**x) for x in info.get("diagnostics", [])])

    def to_frame(self) -> pd.DataFrame:
        """One row per request: case_id, rewrite, target_new, target_true, optimisation steps, P(target_new) at
        the last step, the final loss and how far a multi-layer edit reached its target."""
        return frame([{"case_id": q.case_id, "rewrite": q.rewrite, "target_new": q.target_new,
                       "target_true": q.target_true, "steps": r.steps, "p_target": r.p_target,
                       "loss": r.losses[-1].get("loss") if r.losses else None, "reached": r.reached}
                      for q, r in zip(self.requests, self.per_request)])

    def figure(self) -> Any:  # a plotly Figure
        """The target optimisation's loss per step (per request) and ||dW||_F / ||W||_F per edited parameter."""
        return edit_figure(self.to_json())


def _per_layer(layers: list[LayerReport]) -> list[dict[str, Any]]:
    """One row per layer: the first map's numbers plain, every other map's prefixed with its part ("o_proj_")."""
    rows: dict[int, dict[str, Any]] = {}
    for r in layers:
        row = rows.setdefault(r.layer, {"layer": r.layer})
        prefix = "" if len(row) == 1 else f"{r.part}_"
        row.update({f"{prefix}residual_norm": r.residual_norm, f"{prefix}delta_norm": r.delta_norm,
                    f"{prefix}weight_norm": r.weight_norm, f"{prefix}relative_norm": r.relative_norm})
    return list(rows.values())
