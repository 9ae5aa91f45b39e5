"""Evaluation of edits: metrics (metrics.py), shipped evaluation sets (datasets.py), batch evaluation with resumable
results (evaluate.py; its work items, in process or on Ray, in items.py), several methods on one request
(compare.py), hyperparameter sweeps (sweep.py), lifelong editing (sequential.py, its measures in
lifelong_measures.py, its tables and curves in lifelong.py) and how an evaluation scales over Ray workers
(scale.py)."""
from .datasets import EVAL_SETS, EvalRecord, as_record, load_eval_set, requests_of
from .evaluate import evaluate, summarize
from .lifelong_measures import perplexity
from .measure import EvalSpec, edit_and_measure, measure, record_metrics
from .metrics import EditMetrics
from .sequential import SequentialSpec, sequential

__all__ = ["EVAL_SETS", "EvalRecord", "as_record", "load_eval_set", "requests_of", "EvalSpec", "evaluate",
           "edit_and_measure", "measure", "record_metrics", "summarize", "EditMetrics", "SequentialSpec",
           "sequential", "perplexity"]
