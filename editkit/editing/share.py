"""How an edit's update acts on other keys: the "share" a method predicts (the bleed map, evaluation/bleed.py).

An edit changes linear maps W (down-projections; PMET's ablation also W_O) by Delta W, so at any token whose input
to a map is k its output changes by exactly Delta W k. A method that can say what that means declares
`predict_share(lm, result) -> SharePrediction` on its registry entry (methods.Method): the share s at every token
(s = 1: "the update treats this token like the edited subject", s = 0: untouched) and the predicted change of each
edited map's output, which the bleed map checks against the measured change. A method without it shows no
prediction.

`update_share` is the prediction from the update alone, for any update of these maps (MEMIT, PMET, AlphaEdit):

    s(prompt, t) = sum_l <Delta W_l k_{l,t}, Delta W_l k*_l> / sum_l ||Delta W_l k*_l||^2,

the projection of what the update writes at token t onto what it writes for the edited subject (keys k_{l,t} read
in the edited model, k*_l the subject's template-averaged keys, ROME Eq. 3). Only the first edited map's keys are
unchanged by the edit, so its change is checked; later layers' keys also move. ROME's closed form is in
methods/rome.py.
"""
from __future__ import annotations

import torch

from ..core.errors import EditkitError
from ..model.sites import Site
from ..model.weights import applied
from .keys import read_sites
from .stats import MODULES


def edited_maps(lm, delta: dict) -> list[tuple[str, int, str]]:
    """(part, layer, parameter name) of every edited linear map in a delta, by layer."""
    names = {}
    for part in MODULES:
        for l in range(lm.adapter.n_layers):
            try:
                names[lm.adapter.param_name(part, l)] = (part, l)
            except EditkitError:
                break  # a family without this part
    out = []
    for name in delta:
        if name not in names:
            raise EditkitError(f"the bleed map follows edits of down-projections and W_O; {name} is neither")
        out.append((*names[name], name))
    return sorted(out, key=lambda x: (x[1], x[0]))


def key_sites(maps: list[tuple[str, int, str]]) -> list[Site]:
    """The input site of each edited map (where its keys k are read)."""
    return [Site(MODULES[part], l) for part, l, _ in maps]


class SharePrediction:
    """A method's prediction for the edited maps `maps` (edited_maps): `share(keys)` and `change(i, keys)` take the
    keys at each map's input site (batch, tokens, d_in), read in the edited model. The change is exact for the
    first `checked` maps."""

    formula = ""  # the predicted change, in words (JSON "formula")
    axis = "predicted share s"  # the share's axis title in charts

    def __init__(self, maps: list[tuple[str, int, str]], checked: int):
        self.maps, self.checked = maps, checked

    def share(self, keys: list[torch.Tensor]) -> torch.Tensor:
        """s at every token (batch, tokens)."""
        raise NotImplementedError

    def change(self, i: int, keys: torch.Tensor) -> torch.Tensor:
        """The predicted change of map i's output at every token (batch, tokens, d_out)."""
        raise NotImplementedError


class UpdateShare(SharePrediction):
    """The update's own projection (module docstring)."""

    formula = "Delta W k (the method's own update)"
    axis = "predicted share s = Σ⟨ΔW k, ΔW k*⟩ / Σ‖ΔW k*‖²"

    def __init__(self, maps, updates: list[torch.Tensor], k_star: list[torch.Tensor]):
        super().__init__(maps, checked=1)
        self.updates = updates  # Delta W per map, math layout (d_out, d_in)
        self.ref = [dW @ k for dW, k in zip(updates, k_star)]  # what the update writes for the edited subject
        self.denom = sum(float(r @ r) for r in self.ref)

    def share(self, keys: list[torch.Tensor]) -> torch.Tensor:
        return sum((self.change(i, K) @ self.ref[i]) / max(self.denom, 1e-30) for i, K in enumerate(keys))

    def change(self, i: int, keys: torch.Tensor) -> torch.Tensor:
        return keys @ self.updates[i].T


def update_share(lm, result) -> UpdateShare:
    """The update's own projection for `result` (an EditResult), with k* of its first request read in the edited
    model."""
    maps = edited_maps(lm, result.delta)
    conv1d = lm.adapter.family.conv1d
    updates = [result.delta[name].float().T if conv1d else result.delta[name].float() for _, _, name in maps]
    sites = key_sites(maps)
    with applied(lm, result.delta):
        star = read_sites(lm, result.requests[:1], result.hparams, {f"k{i}": s for i, s in enumerate(sites)}, {})
    return UpdateShare(maps, updates, [star[f"k{i}"][:, 0] for i in range(len(maps))])
