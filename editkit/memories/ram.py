"""The RAM the FFN-memory analyses need, estimated before they run (a served app's queue admits them within
its budget): a trigger index reads every layer's hidden units for one batch of corpus chunks at a time
(triggers.DEFAULT_BATCH x DEFAULT_SEQ_LEN row-positions) and keeps a running top-t per memory; the layer-level
analyses add the sampled positions' coefficients at every layer and value logits over the vocabulary in
batches of 128 memories. Counted at their largest and summed, times ram.MARGIN.
"""
from __future__ import annotations

from ..model.ram import capture_bytes, step_bytes, vocab_bytes, with_margin
from .triggers import DEFAULT_BATCH, DEFAULT_SEQ_LEN, DEFAULT_TOP

VALUE_BATCH = 128  # memories whose value logits are computed at once (geva.py)


def index_ram(lm) -> int:
    """Bytes a trigger index build needs beyond the weights."""
    rows = DEFAULT_BATCH * DEFAULT_SEQ_LEN
    top = lm.adapter.n_layers * lm.adapter.d_ff * DEFAULT_TOP * 8 * 2  # values and positions, merged per batch
    return with_margin(capture_bytes(lm, rows) + step_bytes(lm, rows) + top)


def analyses_ram(lm, positions: int) -> int:
    """Bytes the layer-level analyses over `positions` sampled positions need (a trigger index included)."""
    return with_margin(capture_bytes(lm, positions) + vocab_bytes(lm, VALUE_BATCH)) + index_ram(lm)
