"""The RAM an edit needs, estimated before it runs (a served app's queue admits it within its budget).

    edit_ram(lm, ["rome", "memit"], requests=1)     # bytes: the largest method's, they run one after another

An edit of b requests by a locate-then-edit method keeps, at its largest:
- the target optimisation: b x (context templates + 2) rows of POSITIONS tokens after their cached context
  prefix, with autograd over the blocks from the first edited layer up, and their target tokens' logits over the
  vocabulary (TARGET_TOKENS per row);
- the statistics: per edited layer the key second moment C and the solve's d_ff x d_ff temporaries (AlphaEdit's
  projection too), and, on a method's first use only (run.first_use says what is not cached yet), the corpus pass
  that computes C (one block step over STATS_ROWS row-positions).
Everything is counted at its largest and summed, times ram.MARGIN; the hyperparameters give the layers and
templates (the per-model defaults unless overridden).
"""
from __future__ import annotations

from ..model.ram import graph_bytes, matrix_bytes, step_bytes, vocab_bytes, with_margin
from .defaults import load_hparams
from .run import first_use

POSITIONS = 16  # tokens of one row after its cached context prefix (the prompt and target), short facts
TARGET_TOKENS = 4  # target tokens scored per row
STATS_ROWS = 4096  # row-positions of one step of the statistics' corpus pass
MATRICES = 3  # d_ff x d_ff matrices per edited layer: C, its factor or inverse, and a projection or the solve's


def method_ram(lm, method: str, requests: int = 1, overrides: dict | None = None) -> int:
    """Bytes one method's edit of `requests` requests needs beyond the weights (see module docstring)."""
    L = lm.adapter.n_layers
    try:
        hp = load_hparams(method, lm, overrides or {})
        layers, templates = list(hp.layers), int(getattr(hp, "context_templates", 10) or 10)
        first = bool(first_use(lm, hp, method).get("statistics"))
    except Exception:  # noqa: BLE001 - bad hyperparameters are refused by the edit itself
        layers, templates, first = [0], 10, True
    rows = max(1, int(requests)) * (templates + 2)
    target = graph_bytes(lm, rows * POSITIONS, L - min(layers)) + vocab_bytes(lm, rows * TARGET_TOKENS)
    stats = matrix_bytes(lm, MATRICES * len(layers)) + (step_bytes(lm, STATS_ROWS) if first else 0)
    return with_margin(target + stats)


def edit_ram(lm, methods, requests: int = 1, overrides: dict | None = None) -> int:
    """Bytes an edit by each of `methods` in turn needs: the largest one's (they run one after another)."""
    overrides = overrides or {}
    return max((method_ram(lm, m, requests, overrides.get(m)) for m in methods), default=0)


def scoring_ram(lm, tokens: int = 512) -> int:
    """Bytes of scoring `tokens` tokens of text (a lifelong run's perplexity checkpoints): their logits over the
    vocabulary and one block step."""
    return with_margin(vocab_bytes(lm, tokens, copies=1) + step_bytes(lm, tokens))
