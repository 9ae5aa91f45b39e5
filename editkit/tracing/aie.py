"""Average indirect effect over the facts the model knows (Meng et al. 2022, Fig. 2 / Sec. 2.2).

For every known fact (editkit.facts.predicted_facts) the three traces are run; each token is put in a class
(first / middle / last subject token, first subsequent token, further tokens, last token) and its indirect
effect IE = p_restored - p_corrupted is averaged per class and layer over facts, with a 95% band
mean +- 1.96 * sd / sqrt(N). Results are cached per fact on disk, so the computation resumes and the page shows
it instantly afterwards.
"""
from __future__ import annotations

import json

import numpy as np

from ..editing.weights import model_key
from ..errors import EditkitError
from ..facts import predicted_facts
from ..cache import Store
from .engine import fast_trace
from .noise import parse_noise
from .setup import KINDS, prepare

CLASSES = ("first subject", "middle subject", "last subject", "first subsequent", "further tokens", "last token")


def token_classes(n_tokens: int, subject_range: tuple[int, int]) -> dict[str, list[int]]:
    b, e = subject_range
    last = n_tokens - 1
    classes = {c: [] for c in CLASSES}
    for t in range(n_tokens):
        if t == last:
            classes["last token"].append(t)
        elif t == b:
            classes["first subject"].append(t)
        elif t == e - 1:
            classes["last subject"].append(t)
        elif b < t < e - 1:
            classes["middle subject"].append(t)
        elif t == e:
            classes["first subsequent"].append(t)
        elif t > e:
            classes["further tokens"].append(t)
    if e - 1 == last:  # subject at the very end: its last token is also the last token
        classes["last subject"].append(last)
    return classes


STORE = Store("tracing/aie", version=2)  # one JSON line per traced fact, appended as they finish


def _cache_path(lm, samples, noise, window):
    return STORE.path(model_key(lm), ".jsonl", samples=samples, noise=noise, window=window)


def average_indirect_effect(lm, n_facts: int = 50, samples: int = 10, noise: str = "3s", window: int = 10,
                            progress=None) -> dict:
    """Per kind and token class: mean IE per layer, its 95% band, and N (facts)."""
    if n_facts < 1:
        raise EditkitError("n_facts must be at least 1")
    facts = predicted_facts(lm)[:n_facts]
    if not facts:
        raise EditkitError("the model predicts none of the known facts")
    path = _cache_path(lm, samples, noise, window)
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                done[row["known_id"]] = row
            except (ValueError, KeyError):
                continue  # a torn last line from an interrupted run: recomputed below
    spec = parse_noise(noise)
    with path.open("a") as f:
        for i, fact in enumerate(facts):
            if fact["known_id"] not in done:
                setup = prepare(lm, fact["prompt"], fact["subject"], samples=samples, noise=spec)
                row = {"known_id": fact["known_id"], "low": setup.low_score, "high": setup.high_score,
                       "n_tokens": len(setup.tokens), "subject_range": list(setup.subject_range)}
                for kind in KINDS:
                    row[kind] = fast_trace(lm, setup, kind, window).tolist()
                f.write(json.dumps(row) + "\n")
                f.flush()
                done[fact["known_id"]] = row
            if progress:
                progress((i + 1) / len(facts), f"{i + 1}/{len(facts)} facts")
    rows = [done[f["known_id"]] for f in facts]
    out = {"n_facts": len(rows), "samples": samples, "noise": noise, "window": window, "classes": list(CLASSES),
           "layers": lm.adapter.n_layers, "kinds": {}}
    for kind in KINDS:
        per_class = {}
        for c in CLASSES:
            values = []
            for row in rows:
                idx = token_classes(row["n_tokens"], tuple(row["subject_range"]))[c]
                if idx:
                    ie = np.array(row[kind])[idx] - row["low"]
                    values.append(ie.mean(0))
            if values:
                v = np.stack(values)
                sd = v.std(0, ddof=1) if len(v) > 1 else np.zeros(v.shape[1])
                half = 1.96 * sd / np.sqrt(len(v))
                per_class[c] = {"mean": v.mean(0).tolist(), "low": (v.mean(0) - half).tolist(),
                                "high": (v.mean(0) + half).tolist(), "n": len(v)}
        out["kinds"][kind] = per_class
    return out
