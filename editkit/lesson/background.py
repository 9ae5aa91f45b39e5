"""The background text of locate-then-edit (the former Learn page) as data: causal tracing, key-value memories,
ROME, MEMIT, PMET and the metrics, with formulas and references. The Lesson page draws each section in an
expander beside the step it explains. Plain data, no Streamlit: the page imports it once, with the library,
and no import of it can fail half way. A block is ("title" | "text" | "latex", content); "{methods}" in a text
stands for the registered methods (`intro()`)."""
from __future__ import annotations

INTRO = [
    ('text',
     'Model editing changes one fact a language model knows ("The Eiffel Tower is in Paris" → "... '
     'in Rome") without retraining it and without disturbing the rest. The *locate-then-edit* '
     'methods in editkit work in two steps: first find **where** the fact is recalled (causal '
     'tracing), then rewrite the weights of exactly that place, a feed-forward (FFN) layer, with a '
     'closed-form update ({methods}).'),
]

TRACING = [
    ('title', '1. Causal tracing: where is the fact recalled?'),
    ('text',
     'Meng et al. (2022, *Locating and Editing Factual Associations in GPT*, ROME) run the prompt '
     'three times. The **clean run** predicts the answer o (" Seattle" for "The Space Needle is in '
     'downtown") and records every hidden state. The **corrupted run** adds Gaussian noise (about 3 '
     "times the standard deviation of the token embeddings) to the embeddings of the subject's "
     'tokens, so the model can no longer recall o. A **restored run** is the corrupted run with one '
     'state h_i^(l) (layer l, token i: a hidden state, an MLP output or an attention output) put '
     'back to its clean value. If restoring that one state brings the answer back, the state '
     'carries the fact. The **indirect effect** measures this:'),
    ('latex',
     '\\mathrm{IE}(h_i^{(l)}) = P_{*}\\!\\left(o \\mid \\text{restored } h_i^{(l)}\\right) - '
     'P_{*}\\!\\left(o \\mid \\text{corrupted}\\right)'),
    ('text',
     'averaged over several noise samples (P_* is the probability under the corrupted input). The '
     'average over many facts (AIE) shows the typical picture: a strong effect of **middle-layer '
     'MLPs at the last subject token** (GPT-2 XL layers 15-20), while attention matters mostly at '
     'the last token, copying the recalled fact to the output. *Severing* the MLPs (freezing them '
     'in the corrupted state while restoring a hidden state) removes the middle-layer effect: the '
     'MLPs do the recall. → page **Causal tracing**.'),
]

MEMORIES = [
    ('title', '2. FFN layers are key-value memories'),
    ('text',
     'Geva et al. (2021, *Transformer Feed-Forward Layers Are Key-Value Memories*) read an FFN '
     'layer as a memory with d_ff slots. The first matrix K holds d_ff **keys** (pattern detectors '
     'over the input), the second matrix V holds d_ff **values**; the activation gives each memory '
     'a non-negative coefficient and the output is the coefficient-weighted sum of the values:'),
    ('latex',
     '\\mathrm{FFN}(x) = f\\!\\left(x K^{\\top}\\right) V = \\sum_{i=1}^{d_{ff}} m_i\\, v_i, '
     '\\qquad m = f(x K^{\\top})'),
    ('text',
     "A key's **trigger examples** are the text prefixes whose representation excites it most; "
     'shallow-layer keys fire on surface patterns ("ends with the word *of*"), deep-layer keys on '
     'semantic ones. A value projected through the output embedding, softmax(E v_i), is a '
     'distribution over next tokens, and in upper layers it agrees with the token that follows the '
     "key's trigger examples. The layer's output is usually a *composition* of many memories, not a "
     'copy of one. → page **FFN memories**.'),
]

ROME = [
    ('title', '3. ROME: a rank-one update of one MLP'),
    ('text',
     "ROME treats the MLP's output matrix W (d_model × d_ff) as a linear associative memory: a key "
     'k (the FFN activation at the last subject token) is mapped to a value v = W k. To make the '
     'subject s recall the new object o*, ROME computes **k*** (the key of s, averaged over ~50 '
     'random text prefixes) and **v*** (a vector which, written as the MLP output, makes the model '
     'predict o*, found by gradient descent on −log P(o*) plus a KL term that keeps "{s} is a" '
     'unchanged). It then solves: change W as little as possible on the keys it already stores '
     '(second moment C = K_0 K_0^T, estimated on Wikipedia-like text) subject to Ŵ k* = v*. The '
     'solution is rank one:'),
    ('latex',
     '\\hat W = W + \\Lambda\\,(C^{-1} k_*)^{\\top}, \\qquad \\Lambda = \\frac{v_* - W k_*}{(C^{-1} '
     'k_*)^{\\top} k_*}'),
    ('text',
     "Multiply by k* and the identity Ŵ k* = v* holds exactly (editkit's tests check it). One edit "
     'is precise, but many sequential ROME edits eventually degrade the model (Gupta et al. 2024). '
     '→ page **Edit & compare**.'),
]

MEMIT = [
    ('title', '4. MEMIT: many facts, spread over several layers'),
    ('text',
     'MEMIT (Meng et al. 2023, *Mass-Editing Memory in a Transformer*) inserts a whole batch of u '
     'facts at once into a range of critical layers ℛ (GPT-J layers 3-8). The new keys are the '
     'columns of K, the residual R = V − W_0 K is what the layers must add, and the least-squares '
     'update that also preserves the old memories (weighted by λ) is:'),
    ('latex', '\\Delta = R\\,K^{\\top}\\left(\\lambda C + K K^{\\top}\\right)^{-1}'),
    ('text',
     'The target residual is computed at the last critical layer L and **spread evenly** over the '
     'layers: layer l (processed from the first to the last) takes the share'),
    ('latex', 'R^{l} = \\frac{V - W_0^{l} K^{l}}{L - l + 1}'),
    ('text', 'of what is still missing, so each layer makes a small change instead of one layer a large one.'),
]

PMET = [
    ('title', '5. PMET: optimise attention and FFN together, update only the FFN'),
    ('text',
     'Li et al. (2023, *PMET: Precise Model Editing in a Transformer*) observe (their Fig. 2) that '
     'the attention (MHSA) states keep changing through the layers while the FFN states settle in '
     'one direction after the middle layers: attention acts as a general *knowledge extractor*, the '
     'FFN stores the fact. PMET therefore adds optimisable vectors δ^a and δ^m to **both** the MHSA '
     'output a and the FFN output m at the last critical layer, optimises them jointly (loss: φ · '
     '−log P(o*) over prefixes + μ · KL on "{s} is a"), but keeps only the FFN target v^m = m + δ^m '
     'and updates only FFN weights, with the MEMIT update and a **square-root spreading**:'),
    ('latex', 'R^{l} = \\frac{V - W_0^{l} K^{l}}{\\sqrt{L - l + 1}}'),
    ('text',
     'Because the FFN target no longer has to carry what attention would contribute, the update is '
     'more precise. → pages **Attention vs FFN** (the Fig. 2 curves) and **Edit & compare**.'),
]

METRICS = [
    ('title', '6. Measuring an edit'),
    ('text',
     "CounterFact (Meng et al. 2022) and PMET's appendix B score an edit from s: o_c → o* by "
     'comparing probabilities (𝟙 is 1 when the condition holds):'),
    ('latex',
     '\\text{Efficacy} = \\mathbb{E}_{x \\in \\text{edit prompts}}\\; \\mathbb{1}\\left[P(o_* \\mid '
     'x) > P(o_c \\mid x)\\right]'),
    ('latex',
     '\\text{Generalization} = \\mathbb{E}_{x \\in \\text{paraphrases}}\\; \\mathbb{1}\\left[P(o_* '
     '\\mid x) > P(o_c \\mid x)\\right]'),
    ('latex',
     '\\text{Specificity} = \\mathbb{E}_{x \\in \\text{neighbourhood}}\\; \\mathbb{1}\\left[P(o_c '
     '\\mid x) > P(o_* \\mid x)\\right]'),
    ('text',
     'Efficacy: the edit works on its own prompt. Generalization: it also works on rephrasings. '
     'Specificity (locality): unrelated subjects that share the relation keep their original answer '
     '(a failure is *bleed-over*). The overall **Score** is the harmonic mean of the three. '
     'Generation-based metrics (from ROME) check the text the edited model writes about the '
     'subject:'),
    ('latex',
     '\\text{Fluency} = \\tfrac{1}{2}\\left(\\tfrac{2}{3} H_2 + \\tfrac{4}{3} H_3\\right), \\qquad '
     'H_n = -\\sum_{g} f_n(g)\\,\\log_2 f_n(g)'),
    ('text',
     'the weighted entropy of the frequencies f_2, f_3 of its bi- and tri-grams (low when the text '
     'repeats itself), averaged over generations and reported ×100, and **Consistency**, the cosine '
     'similarity between TF-IDF vectors of the generated text and reference text about o* (high '
     'when the model writes about the subject as if o* were true). zsRE (Levy et al. 2017) is '
     'scored with token-level accuracies on the edit question, its rephrasing and an unrelated '
     'question. → page **Edit & compare**.'),
]

REFERENCES = [
    ('title', 'References'),
    ('text',
     '- K. Meng, D. Bau, A. Andonian, Y. Belinkov. *Locating and Editing Factual Associations in '
     'GPT.* NeurIPS 2022 (ROME, causal tracing, CounterFact).\n- K. Meng, A. S. Sharma, A. '
     'Andonian, Y. Belinkov, D. Bau. *Mass-Editing Memory in a Transformer.* ICLR 2023 (MEMIT).\n- '
     'X. Li, S. Li, S. Song, J. Yang, J. Ma, J. Yu. *PMET: Precise Model Editing in a Transformer.* '
     'AAAI 2024, arXiv:2308.08742.\n- M. Geva, R. Schuster, J. Berant, O. Levy. *Transformer '
     'Feed-Forward Layers Are Key-Value Memories.* EMNLP 2021.\n- A. Gupta, A. Rao, G. '
     'Anumanchipalli. *Model Editing at Scale leads to Gradual and Catastrophic Forgetting.* '
     '2024.\n- O. Levy, M. Seo, E. Choi, L. Zettlemoyer. *Zero-Shot Relation Extraction via Reading '
     'Comprehension.* CoNLL 2017 (zsRE).'),
]


SECTIONS = {"tracing": TRACING, "memories": MEMORIES, "rome": ROME, "memit": MEMIT, "pmet": PMET,
            "metrics": METRICS, "references": REFERENCES}


def intro(methods: str) -> list[tuple[str, str]]:
    """The opening paragraph, naming `methods` (the registered ones, as text)."""
    return [(kind, text.replace("{methods}", methods)) for kind, text in INTRO]


def title(name: str) -> str:
    """A section's title without its number ("Causal tracing: where is the fact recalled?")."""
    import re

    head = next((text for kind, text in SECTIONS[name] if kind == "title"), name)
    return re.sub(r"^\d+\.\s*", "", head)


def body(name: str) -> list[tuple[str, str]]:
    """A section's blocks after its title."""
    return [b for b in SECTIONS[name] if b[0] != "title"]
