"""FFN layers as key-value memories (Geva et al. 2021): read, trigger, switch and analyse the memories.

FFN(x) = sum_i f(x . k_i) v_i: the down-projection's input m = f(x K^T) holds the memory coefficients m_i (one
per hidden unit, d_ff of them), and column i of W_out (`adapter.down_weight(l)`, (d_model, d_ff)) is the value v_i.
- `inspect`   : the memories active at one position, their value tokens, the residual before/after each FFN;
- `triggers`  : the corpus prefixes that activate a key most (a cached per-model index);
- `intervene` : switch memories off (m_i = 0) or on (m_i = max_j m_j) and compare predictions;
- `geva`      : the paper's layer-level analyses (value/trigger agreement, compositionality, when the prediction
                is fixed).
"""
from .inspect import MemoryView, memories_at
from .intervene import InterventionResult, intervene
from .triggers import TriggerExample, TriggerIndex, get_index, trigger_examples

__all__ = ["MemoryView", "memories_at", "InterventionResult", "intervene", "TriggerExample", "TriggerIndex",
           "get_index", "trigger_examples"]
