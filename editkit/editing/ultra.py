"""UltraEdit's computation (Gu et al., "UltraEdit: Training-, Subject-, and Memory-Free Lifelong Editing",
arXiv 2505.14679), as plain functions of tensors and a model: no hyperparameter class, no registry.

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

from dataclasses import dataclass

import torch

from ..core.errors import EditkitError
from ..core.settings import limits
from ..model.scoring import target_ids
from ..model.sites import Site

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
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    dev = lm.device
    return {"input_ids": ids.to(dev), "attention_mask": mask.to(dev), "row": torch.tensor(where_row, device=dev),
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
