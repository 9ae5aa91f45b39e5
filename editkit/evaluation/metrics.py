"""Edit metrics, computed the same way for every method.

CounterFact (ROME/MEMIT `eval_utils_counterfact.py`, `summarize.py`), from the mean per-token NLL of target_new
(n*) and target_true (n) after each prompt, P = exp(-mean NLL):
    efficacy       ES = mean over rewrite prompts      1[n* < n]         magnitude EM = mean P(new) - P(true)
    generalization PS = mean over paraphrase prompts   1[n* < n]         magnitude PM
    specificity    NS = mean over neighborhood prompts 1[n < n*]         magnitude NM = mean P(true) - P(new)
    score          S  = harmonic mean (ES, PS, NS)
Fluency: ROME's weighted bi-/tri-gram entropy of a generation, mean_n w_n * H_n with H_n = -sum f log2 f over its
n-gram frequencies, n = (2, 3), w = (2/3, 4/3); averaged over generations (ROME x 100 in its tables).
Consistency: cosine of TF-IDF vectors (raw counts x smooth idf, as sklearn's TfidfVectorizer) between the
generations and reference text about target_new.
EasyEdit token accuracies (teacher forcing): reliability / generalization = share of target_new tokens that are
the argmax after the rewrite / paraphrase prompts; locality = share of the locality answer's positions whose argmax
is unchanged by the edit; portability = token accuracy on portability prompts (no shipped set has them).
Generation-based efficacy (QAEdit, Yang et al. 2025, arXiv 2502.11177: teacher-forced rates overstate real success,
38.5% vs 96.8%): the model continues the rewrite / paraphrase prompt greedily, as a user would see it; a prompt
counts as edited when the continuation's first line mentions target_new and, with target_new's mentions removed,
no longer mentions target_true (`generation_success`; whole words, case-insensitive).
    gen_efficacy       = mean over rewrite prompts    1[continuation says new, not true]
    gen_generalization = mean over paraphrase prompts 1[continuation says new, not true]
zsRE (ROME/MEMIT): efficacy, generalization and specificity are those top-1 token accuracies (of the new answer on
the question and its rephrase, of the NQ answer on the unrelated question); no magnitudes.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass

WORD = re.compile(r"\w+|[^\w\s]")  # words and punctuation, like nltk.word_tokenize for plain text
TFIDF_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # sklearn's default token pattern (lowercased)


def harmonic_mean(values: list[float]) -> float:
    """scipy.stats.hmean: 0 if any value is 0."""
    if not values:
        return float("nan")
    if any(v <= 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


def n_gram_entropy_one(text: str, ns=(2, 3), weights=(2 / 3, 4 / 3)) -> float:
    """ROME's compute_n_gram_entropy: mean over n of w_n * H_n, H_n the entropy (bits) of the n-gram frequencies."""
    tokens = WORD.findall(text)
    terms = []
    for n, w in zip(ns, weights):
        grams = Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
        total = sum(grams.values())
        h = -sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0
        terms.append(w * h)
    return sum(terms) / len(terms)


def n_gram_entropy(texts: list[str]) -> float:
    """Fluency: the arithmetic mean of n_gram_entropy_one over generations."""
    if not texts:
        return float("nan")
    return sum(n_gram_entropy_one(t) for t in texts) / len(texts)


def tfidf_tokens(text: str) -> list[str]:
    return TFIDF_TOKEN.findall(text.lower())


def idf_table(documents: list[str]) -> dict[str, float]:
    """Smooth idf (sklearn): ln((1 + N) / (1 + df)) + 1."""
    df: Counter = Counter()
    for doc in documents:
        df.update(set(tfidf_tokens(doc)))
    n = len(documents)
    return {t: math.log((1 + n) / (1 + c)) + 1 for t, c in df.items()}


def tfidf_cosine(a: str, b: str, idf: dict[str, float]) -> float:
    """Cosine of the TF-IDF vectors of two texts over the idf vocabulary (words outside it are ignored, as with
    a fixed-vocabulary TfidfVectorizer). 0 when either text has no known word."""
    va = {t: c * idf[t] for t, c in Counter(tfidf_tokens(a)).items() if t in idf}
    vb = {t: c * idf[t] for t, c in Counter(tfidf_tokens(b)).items() if t in idf}
    na = math.sqrt(sum(v * v for v in va.values()))
    nb = math.sqrt(sum(v * v for v in vb.values()))
    if na == 0 or nb == 0:
        return 0.0
    return sum(v * vb.get(t, 0.0) for t, v in va.items()) / (na * nb)


def _mention(target: str) -> re.Pattern:
    """A whole-word, case-insensitive pattern for a target (" New York" matches "new york," not "New Yorker")."""
    words = [re.escape(w) for w in target.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", re.IGNORECASE)


def mentions(text: str, target: str | None) -> bool:
    """Whether `text` mentions `target` as whole words (case-insensitive); False for an empty target."""
    return bool(target and target.strip()) and bool(_mention(target).search(text))


def answer_line(continuation: str) -> str:
    """The part of a greedy continuation that answers the prompt: up to the first line break (a model that
    finished its answer starts a new paragraph; text after that is about something else)."""
    return continuation.lstrip("\n").split("\n", 1)[0]


def generation_success(continuation: str, target_new: str, target_true: str | None) -> bool:
    """QAEdit's generation check: the answer line says target_new and, once target_new's own mentions are
    removed (a true target "America" inside a new "North America"), no longer says target_true."""
    line = answer_line(continuation)
    if not mentions(line, target_new):
        return False
    rest = _mention(target_new).sub(" ", line)
    return not mentions(rest, target_true)


def margins(nll_new: list[float], nll_true: list[float], new_should_win: bool) -> list[float]:
    """Per prompt, how far the target that should win is ahead: P(new) - P(true) (or the reverse), with
    P = exp(-mean per-token NLL)."""
    sign = 1 if new_should_win else -1
    return [sign * (math.exp(-n) - math.exp(-t)) for n, t in zip(nll_new, nll_true)]


def compare(nll_new: list[float], nll_true: list[float], new_should_win: bool) -> tuple[float, float]:
    """(success rate, magnitude) over prompts from the mean per-token NLLs of target_new and target_true."""
    if not nll_new:
        return float("nan"), float("nan")
    wins = [(n < t) if new_should_win else (t < n) for n, t in zip(nll_new, nll_true)]
    diff = margins(nll_new, nll_true, new_should_win)
    return sum(wins) / len(wins), sum(diff) / len(diff)


def token_agreement(pre: list[list[int]], post: list[list[int]]) -> float:
    """EasyEdit locality: the share of positions whose argmax token is the same before and after the edit."""
    pairs = [(a, b) for p, q in zip(pre, post) for a, b in zip(p, q)]
    if not pairs:
        return float("nan")
    return sum(a == b for a, b in pairs) / len(pairs)


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of a normal 95% interval (1.96 standard errors); NaNs are skipped."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return float("nan"), float("nan")
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, 1.96 * math.sqrt(var / len(values))


@dataclass
class EditMetrics:
    """One record's metrics at one state of the weights (pre- or post-edit). Rates and accuracies in [0, 1],
    magnitudes are probability differences, fluency in bits; None = not available for this record."""
    efficacy: float | None = None  # ES (CounterFact) or rewrite token accuracy (zsRE)
    efficacy_magnitude: float | None = None  # EM
    generalization: float | None = None  # PS or rephrase token accuracy
    generalization_magnitude: float | None = None  # PM
    specificity: float | None = None  # NS or loc-answer token accuracy
    specificity_magnitude: float | None = None  # NM
    score: float | None = None  # harmonic mean of the three rates
    fluency: float | None = None  # weighted bi-/tri-gram entropy of the generations
    consistency: float | None = None  # TF-IDF cosine of the generations and the reference text
    gen_efficacy: float | None = None  # greedy continuation of the rewrite prompt says new, not true (QAEdit)
    gen_generalization: float | None = None  # the same on the paraphrase prompts
    reliability: float | None = None  # EasyEdit rewrite_acc
    generalization_acc: float | None = None  # EasyEdit rephrase_acc
    portability: float | None = None  # EasyEdit portability (no shipped set has portability prompts)

    def to_dict(self) -> dict:
        return asdict(self)


def nan_to_none(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
