"""The RAM a causal trace needs, estimated before it runs (a served app's queue admits it within its budget).

    trace_ram(lm, "The Eiffel Tower is located in the city of", samples=10)   # bytes

A trace with n noise samples over a prompt of T tokens on a model of L layers keeps, at its largest:
- the preview (attribution patching): the corrupted run's autograd graph over n rows x T positions and L blocks,
  and n rows of logits over the vocabulary for its backward;
- the exact panels: one block step over the rows of every restoration at one token, n x L x (T - t) row-positions,
  at most the engine's MAX_POSITION_ROWS (engine.py); then the final residuals of all n x L x T restorations and
  p(answer) over the vocabulary for up to 4,096 of them at a time, in blocks of VOCAB_BLOCK tokens (the logits,
  their exponentials and the running sums: three copies);
- the setup: the clean and corrupted states of every kind at every layer (n + 1 rows).
The phases run one after another, but the resident peak runs near their sum, not the larger one: the allocator keeps
what the preview freed, and the panels' blocks of other sizes do not reuse it (benchmarks/job_memory.py, Gemma, 10
samples: 408-413 MB in two of three runs against 195 MB for the larger phase). So the estimate is the setup plus both
phases, times ram.MARGIN.
Tokens are counted with the model's tokenizer (a prompt too long for the limits is refused by the trace itself).
"""
from __future__ import annotations

from ..model.ram import graph_bytes, step_bytes, vocab_bytes, with_margin
from ..model.sites import TRACE_KINDS
from ..model.vocab import VOCAB_BLOCK
from .engine import MAX_POSITION_ROWS

ANSWER_ROWS = 4096  # rows projected at once by runner.answer_logprob (its `rows`)


def prompt_tokens(lm, prompt: str) -> int:
    """Tokens of `prompt` with the tokenizer's special tokens (at least 1)."""
    try:
        return max(1, len(lm.tok(prompt)["input_ids"]))
    except Exception:  # noqa: BLE001 - an unusable prompt is refused by the computation itself
        return 1


def trace_ram(lm, prompt: str, samples: int, kinds=TRACE_KINDS, preview: bool = True,
                 tokens: int | None = None) -> int:
    """Bytes a trace of `prompt` with `samples` noise samples and these `kinds` needs beyond the weights."""
    n, L = max(1, int(samples)), lm.adapter.n_layers
    T = tokens or prompt_tokens(lm, prompt)
    d = lm.adapter.d_model
    setup = (n + 1) * T * L * d * 4 * (len(tuple(kinds)) + 1)
    grad = graph_bytes(lm, n * T, L) + vocab_bytes(lm, n) if preview else 0
    rows = n * L * T  # every restoration's final residual, each projected to the vocabulary
    vocab = min(rows, ANSWER_ROWS) * min(lm.adapter.vocab_size, VOCAB_BLOCK) * 4 * 3
    exact = step_bytes(lm, min(MAX_POSITION_ROWS, rows)) + vocab + rows * d * 4
    return with_margin(setup + grad + exact)


FACT_TOKENS = 24  # tokens of a known fact's prompt, an upper bound (the average indirect effect's facts)


def aie_ram(lm, samples: int = 10) -> int:
    """Bytes the average indirect effect needs: its facts are traced one after another (exact panels only)."""
    return trace_ram(lm, "", samples, preview=False, tokens=FACT_TOKENS)
