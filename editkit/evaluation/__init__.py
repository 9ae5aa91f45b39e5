"""Evaluation of edits: metrics (metrics.py), shipped evaluation sets (datasets.py), batch evaluation with resumable
results (evaluate.py) and sequential editing stress (sequential.py)."""
from .datasets import EVAL_SETS, EvalRecord, as_record, load_eval_set, requests_of
from .evaluate import compare_measurements, edit_and_measure, evaluate, measure, record_metrics, summarize
from .metrics import EditMetrics
from .sequential import perplexity, sequential

__all__ = ["EVAL_SETS", "EvalRecord", "as_record", "load_eval_set", "requests_of", "evaluate", "edit_and_measure",
           "measure", "record_metrics", "compare_measurements", "summarize", "EditMetrics", "sequential",
           "perplexity"]
