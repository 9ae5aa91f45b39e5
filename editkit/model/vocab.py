"""The projection to the vocabulary in one pass (runner.py's `answer_logprob` and `logits`, the target
optimisation's loss): `vocab_pass` walks the unembedding matrix in blocks for all rows at once with an online
logsumexp, so the matrix is read once and no (N, V) matrix is held; `vocab_pass_bf16` is its bfloat16
approximation (the tracing engine's fast mode); `vocab_logsumexp` is the same pass with its gradient.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .lm import LM

# vocabulary tokens per block of the online logsumexp (vocab_pass): the block's logits stay in cache
VOCAB_BLOCK = 4096
# vocab_pass and vocab_pass_bf16 sum a block's exponentials in float64 this many columns at a time
SUM_COLUMNS = 512
# up to this many rows the LM head's product is computed as W x^T (Runner.logits, and a generation's steps:
# Runner._head_by_rows): on Gemma's 262k x 640 head MKL's float32 x W^T takes 1.6-5.5x as long at 3-16 rows, about
# the same at 32-64, less from 256 (benchmarks/head_rows.py)
HEAD_BY_ROWS = 16


def at_least_f32(z: torch.Tensor) -> torch.Tensor:
    """float32 logits, or float64 ones for a float64 model (finite-difference checks need them)."""
    return z if z.dtype == torch.float64 else z.float()


def head_product(x: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b, the weight on the left (W x^T) for at most HEAD_BY_ROWS rows without gradients (the same map; a
    logit may differ in its last bit)."""
    rows = x.numel() // max(x.shape[-1], 1)
    if rows > HEAD_BY_ROWS or x.dtype != W.dtype or (torch.is_grad_enabled() and x.requires_grad):
        return torch.nn.functional.linear(x, W, bias)
    flat = x.reshape(-1, x.shape[-1])
    z = torch.mm(W, flat.T).T
    if bias is not None:
        z = z + bias.to(z.dtype)
    return z.contiguous().reshape(*x.shape[:-1], W.shape[0])


def vocab_pass(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None, cap: float | None = None,
               ids: torch.Tensor | None = None, mean: bool = False, block: int = VOCAB_BLOCK,
               argmax: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None,
                                             torch.Tensor | None]:
    """One pass over the unembedding rows w_v (V, d) for all rows x_i (N, d), with logits z = W x + b (and Gemma 2's
    softcap cap * tanh(z / cap)): a running maximum and a float64 sum of exponentials (the online logsumexp), so each
    block of W is read from memory once for all rows; no (N, V) matrix is ever held. Returns (lse (N,) float64, z at
    `ids` (N,) float64 or None, E_softmax(z)[w] (N, d) when `mean` (no softcap) else None, argmax (N,) or None
    without `argmax`). Where no gradient is asked for, each block's logits go into one reused buffer and are
    exponentiated in place."""
    n = x.shape[0]
    m = torch.full((n,), -float("inf"), dtype=torch.float64, device=x.device)
    total = torch.zeros(n, dtype=torch.float64, device=x.device)
    answer = torch.zeros(n, dtype=torch.float64, device=x.device) if ids is not None else None
    acc = torch.zeros(n, W.shape[1], dtype=x.dtype, device=x.device) if mean else None
    best = torch.zeros(n, dtype=torch.long, device=x.device) if argmax else None
    grad = torch.is_grad_enabled() and (x.requires_grad or W.requires_grad)  # attribution patching's backward
    buf = None if grad or x.dtype not in (torch.float32, torch.float64) else \
        torch.empty(n * min(block, W.shape[0]), dtype=x.dtype, device=x.device)
    for j in range(0, W.shape[0], block):
        Wj = W[j:j + block].to(x.dtype)  # a half-precision head meets float32 states block by block
        bj = None if b is None else b[j:j + block].to(x.dtype)
        z = at_least_f32(torch.nn.functional.linear(x, Wj, bj)) if buf is None else _logits_into(x, Wj, bj, buf)
        if cap:
            z = torch.tanh(z / cap) * cap if grad else z.div_(cap).tanh_().mul_(cap)
        top, where = z.max(1) if argmax else (z.amax(1), None)  # max(1) with its indices: ~16x amax's time
        if ids is not None:  # read before z is overwritten by its exponentials
            inside = ((ids >= j) & (ids < j + z.shape[1])).nonzero()[:, 0]
            if len(inside) and answer is not None:
                answer[inside] = z[inside, ids[inside] - j].double()
        new = torch.maximum(m, top.double())
        keep = torch.exp(m - new)  # rescales what was summed under the old maximum (0 on the first block)
        shift = new[:, None].to(z.dtype)
        e = torch.exp(z - shift) if grad else z.sub_(shift).exp_()  # in place: the block's logits written once
        total = total * keep + _sum64(e)
        if acc is not None:
            acc = acc * keep[:, None].to(acc.dtype) + e.to(acc.dtype) @ Wj
        if best is not None and where is not None:
            best = torch.where(top.double() > m, where + j, best)
        m = new
    mean_w = acc / total[:, None].to(acc.dtype) if acc is not None else None
    return m + torch.log(total), answer, mean_w, best


def _logits_into(x: torch.Tensor, Wj: torch.Tensor, bj: torch.Tensor | None, buf: torch.Tensor) -> torch.Tensor:
    """x Wj^T (+ bj) as linear computes it (mm / addmm), written into the reused flat `buf`: a fresh (N x block)
    output per block costs its page faults (25 MB at 1,540 rows; ~15% of the pass measured on Gemma's head)."""
    z = buf[:x.shape[0] * Wj.shape[0]].view(x.shape[0], Wj.shape[0])
    return torch.mm(x, Wj.t(), out=z) if bj is None else torch.addmm(bj, x, Wj.t(), out=z)


def _sum64(e: torch.Tensor) -> torch.Tensor:
    """Row sums in float64, a few columns at a time: sum(dtype=float64) converts its whole input first, and a
    block of 1,540 rows is a 50 MB float64 copy (the same sums up to float64 rounding, ~1e-16)."""
    if e.dtype == torch.float64:
        return e.sum(1)
    total = e[:, :SUM_COLUMNS].sum(1, dtype=torch.float64)
    for i in range(SUM_COLUMNS, e.shape[1], SUM_COLUMNS):
        total = total + e[:, i:i + SUM_COLUMNS].sum(1, dtype=torch.float64)
    return total


def vocab_pass_bf16(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, cap: float | None,
                    ids: torch.Tensor, block: int = VOCAB_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, z at `ids`) as vocab_pass, with the logits from bfloat16 matmuls (an approximation; bf16 matmuls run at
    2.2-2.5x the float32 rate on this CPU). The answer's own logit z_a is a float32 dot product; every other logit is
    computed as z - c inside the matmul's float32 accumulator (x gets a column -c, W a column of ones), with c a
    bf16 number next to z_a, so the bf16 rounding of the output is relative to z - c, small for the tokens that
    hold the probability mass, instead of to z (a logit of 30 rounds to +-0.06 in bf16)."""
    z_a = (x * W[ids].to(x.dtype)).sum(-1)
    c = z_a.to(torch.bfloat16).to(x.dtype)  # exactly representable: -c enters the bf16 matmul unrounded
    xe = torch.cat([x, -c[:, None]], 1).to(torch.bfloat16)
    n = x.shape[0]
    m = torch.full((n,), -float("inf"), dtype=torch.float64, device=x.device)
    total = torch.zeros(n, dtype=torch.float64, device=x.device)
    for j in range(0, W.shape[0], block):
        Wj = W[j:j + block]
        We = torch.cat([Wj.to(torch.bfloat16), torch.ones(Wj.shape[0], 1, dtype=torch.bfloat16, device=x.device)], 1)
        # in place from here: the (rows x block) logits are written once, not once per operation
        z = torch.nn.functional.linear(xe, We).float().add_(c[:, None])
        if b is not None:
            z.add_(b[j:j + block].float())
        if cap:
            z.div_(cap).tanh_().mul_(cap)
        new = torch.maximum(m, z.amax(1).double())  # amax: max(1) also finds the argmax, unused here
        e = z.sub_(new[:, None].float()).exp_()
        total = total * torch.exp(m - new) + _sum64(e)
        m = new
    answer = z_a + (b[ids].to(x.dtype) if b is not None else 0)
    if cap:
        answer = torch.tanh(answer / cap) * cap
    return m + torch.log(total), answer.double()


class _LogSumExp(torch.autograd.Function):
    """lse(W x + b) with its gradient d lse / dx = E_p[w] taken from the same forward pass (no second read of W)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, W: torch.Tensor,
                b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        lse, _, mean_w, best = vocab_pass(x.detach(), W.detach(), None if b is None else b.detach(), mean=True)
        lse = lse.to(x.dtype)
        ctx.save_for_backward(mean_w)
        ctx.mark_non_differentiable(mean_w, best)
        return lse, mean_w, best

    @staticmethod
    def backward(ctx: Any, g_lse: torch.Tensor, g_mean: Any,
                 g_best: Any) -> tuple[torch.Tensor, None, None]:
        (mean_w,) = ctx.saved_tensors
        return g_lse[:, None] * mean_w, None, None


def vocab_logsumexp(lm: LM, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """For final-normed states x (N, d): (lse (N,), E_p[w] (N, d), argmax (N,)) of the logits W x + b, without
    ever holding the (N, V) logits: log p(t | x) = w_t . x + b_t - lse, and KL terms follow from these
    (editing/targets.py). The gradient flows through lse. None when the model's unembedding is not a plain linear
    map or has a softcap (then use `logits`)."""
    a = lm.adapter
    head = a.unembed_module
    if a.final_softcap or not isinstance(head, torch.nn.Linear):
        return None
    W, bias = lm.runner._head_weight()
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    out = _LogSumExp.apply(x, W, bias)  # type: ignore[no-untyped-call]
    return out
