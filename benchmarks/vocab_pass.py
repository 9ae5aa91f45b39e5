"""The exact projection to the vocabulary (vocab.vocab_pass) against its previous form, on Gemma 3 270M's head and
real final states, in one process, interleaved rounds (docs/results/speed.md, 'The exact projection without its
copies').

    python benchmarks/vocab_pass.py                 # 300, 900 and 1,540 rows, 5 rounds
    python benchmarks/vocab_pass.py --rows 900 --rounds 9

The states: the first 400 counterfact-val rewrites with their true answers, run through the model (4,327 token
states, final-normed). Random states are not used: their logits spread so widely that most exponentials are
subnormal floats, slow on x86, which real logits never are.
"""
from __future__ import annotations

import argparse
import time

import torch

import editkit
from editkit.evaluation.datasets import load_eval_set
from editkit.model.vocab import vocab_pass


def before(x, W, b=None, ids=None, block=4096):
    """vocab_pass as it was (a fresh output per block, exp out of place, a float64 copy for the sum, the argmax)."""
    n = x.shape[0]
    m = torch.full((n,), -float("inf"), dtype=torch.float64)
    total = torch.zeros(n, dtype=torch.float64)
    answer = torch.zeros(n, dtype=torch.float64)
    best = torch.zeros(n, dtype=torch.long)
    for j in range(0, W.shape[0], block):
        Wj = W[j:j + block]
        z = torch.nn.functional.linear(x, Wj, None if b is None else b[j:j + block])
        top, where = z.max(1)
        new = torch.maximum(m, top.double())
        e = torch.exp(z - new[:, None].to(z.dtype))
        total = total * torch.exp(m - new) + e.sum(1, dtype=torch.float64)
        best = torch.where(top.double() > m, where + j, best)
        m = new
        inside = ((ids >= j) & (ids < j + z.shape[1])).nonzero()[:, 0]
        if len(inside):
            answer[inside] = z[inside, ids[inside] - j].double()
    return m + torch.log(total), answer


def states(lm, n_texts: int = 400) -> torch.Tensor:
    texts = [r.request.rewrite + " " + r.request.target_true for r in load_eval_set("counterfact-val")[:n_texts]]
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), 50):
            enc = lm.tok(texts[i:i + 50], return_tensors="pt", padding=True)
            h = lm.model(**enc, output_hidden_states=True).hidden_states[-1]  # HF's last state is final-normed
            out.append(h[enc["attention_mask"].bool()])
    return torch.cat(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="300,900,1540")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    lm = editkit.load("gemma-3-270m")
    W, b = lm.runner._head_weight()
    real = states(lm)
    torch.manual_seed(0)
    for rows in (int(r) for r in args.rows.split(",")):
        x, ids = real[:rows], torch.randint(0, W.shape[0], (rows,))
        with torch.no_grad():
            lse0, a0 = before(x, W, b, ids)
            lse1, a1, _, _ = vocab_pass(x, W, b, ids=ids, argmax=False)
            times = {"before": [], "after": []}
            for _ in range(args.rounds):
                for name, f in (("before", lambda: before(x, W, b, ids)),
                                ("after", lambda: vocab_pass(x, W, b, ids=ids, argmax=False))):
                    t0 = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - t0)
        gmac = rows * W.shape[0] * W.shape[1] / 1e9
        print(f"{rows} rows: before {min(times['before']):.3f} s, after {min(times['after']):.3f} s "
              f"({gmac / min(times['after']):.1f} GMAC/s); answers equal {torch.equal(a0, a1)}, "
              f"max |lse difference| {float((lse0 - lse1).abs().max()):.1e}", flush=True)


if __name__ == "__main__":
    main()
