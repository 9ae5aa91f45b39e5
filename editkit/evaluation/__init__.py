"""Evaluation of edits: metrics (metrics.py), shipped evaluation sets (datasets.py), batch evaluation with resumable
results (evaluate.py) and sequential editing stress (sequential.py)."""
from .datasets import EVAL_SETS, EvalRecord, load_eval_set
from .evaluate import compare_measurements, evaluate, measure, summarize
from .sequential import perplexity, sequential

__all__ = ["EVAL_SETS", "EvalRecord", "load_eval_set", "evaluate", "measure", "compare_measurements", "summarize",
           "sequential", "perplexity"]
