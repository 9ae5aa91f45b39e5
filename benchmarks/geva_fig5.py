"""Is Geva's Fig. 5 at chance on Gemma 3 270M a bug or a property of the model? An independent re-computation.

The app's pipeline (memories/triggers.py: a running top-k index; memories/geva.py: next token of the top-1 trigger,
rank in softmax(E v_i)) is proven on a constructed case by tests/test_memories.py::test_fig5_finds_an_implanted_memory.
This script recomputes Fig. 5 on the real model without the index: it captures every coefficient m_i of the sampled
memories over the corpus positions, takes each memory's strongest position (by m_i, as Geva et al., and by |m_i|
with the value's sign flipped for negative m_i, which a gated MLP needs), and ranks the following token in the
value's vocabulary projection, without and with the final norm's scale. It prints one JSON line per layer:

    python benchmarks/geva_fig5.py --layers 0,6,12,15,17 --tokens 4000 --memories 256

Chance: agreement 1/262,144, median rank 131,072, share of ranks <= 1000 0.0038.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from editkit.data import corpus  # noqa: E402
from editkit.memories.inspect import value_vectors  # noqa: E402
from editkit.model.loading import load_model  # noqa: E402
from editkit.model.sites import Site  # noqa: E402


@torch.no_grad()
def coefficients(lm, layers: list[int], n_tokens: int):
    """m (positions, d_ff) per layer at every non-BOS position that has a next token, and those next tokens."""
    bos = lm.tok.bos_token_id
    ms = {l: [] for l in layers}
    nexts = []
    for chunk in corpus.token_chunks(lm.tok, n_tokens, 128):
        got = lm.runner.read({str(l): Site("mlp_key", l) for l in layers},
                             input_ids=torch.tensor([chunk], device=lm.device))
        keep = [j for j in range(len(chunk) - 1) if chunk[j] != bos]
        for l in layers:
            ms[l].append(got[str(l)][0, keep].float().cpu())
        nexts += [chunk[j + 1] for j in keep]
    return {l: torch.cat(v) for l, v in ms.items()}, torch.tensor(nexts)


@torch.no_grad()
def layer_report(lm, layer: int, M: torch.Tensor, nexts: torch.Tensor, memories: torch.Tensor) -> dict:
    Ms = M[:, memories]
    top, bottom = Ms.max(0), Ms.min(0)
    out = {"layer": layer, "memories": len(memories),
           "share_strongest_negative": float((bottom.values.abs() > top.values).float().mean()),
           "median_max_m": float(top.values.median()), "median_min_m": float(bottom.values.median())}
    V = value_vectors(lm, layer, memories.tolist())
    strongest = Ms.abs().max(0).indices
    sign = torch.sign(Ms[strongest, torch.arange(len(memories))])
    for trigger, pos, s in (("max m", top.indices, torch.ones(len(memories))), ("max |m|, signed", strongest, sign)):
        for norm in (False, True):
            logits = lm.runner.logits((V * s[:, None].to(V.dtype)).to(lm.device), norm=norm).cpu()
            w = nexts[pos]
            ranks = ((logits > logits.gather(1, w.view(-1, 1))).sum(-1) + 1).numpy()
            out[f"{trigger}, {'final norm' if norm else 'E v'}"] = {
                "agreement": float((logits.argmax(-1) == w).float().mean()), "median_rank": float(np.median(ranks)),
                "share_rank_le_1000": float((ranks <= 1000).mean())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--layers", default="0,6,12,15,17")
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--memories", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    lm = load_model(args.model)
    layers = [int(x) for x in args.layers.split(",")]
    M, nexts = coefficients(lm, layers, args.tokens)
    rng = np.random.default_rng(args.seed)
    print(json.dumps({"model": lm.name, "positions": len(nexts), "vocab": lm.adapter.vocab_size}), flush=True)
    for l in layers:
        memories = torch.tensor(np.sort(rng.choice(lm.adapter.d_ff, min(args.memories, lm.adapter.d_ff),
                                                   replace=False)))
        print(json.dumps(layer_report(lm, l, M[l], nexts, memories)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
