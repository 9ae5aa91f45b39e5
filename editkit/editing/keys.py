"""Keys shared by ROME, MEMIT and PMET (for E2 and any other method): import them from here.

k* (ROME Sec. 3.1, Eq. 3) = mean over the context templates x_j (context.py) of the down-projection input at the
subject's last token of x_j + prompt(subject). The implementation lives in targets.py next to the target
optimisation; this module is the stable name:
    key_star(lm, layer, request, hp) -> (d_ff,)       template-averaged key of one request
    keys_at(lm, layer, [(text, char_offset)], subject) -> (n, d_ff)   keys of given texts (no averaging)
    contexts(lm, request, hp) -> [(text, char_offset of the prompt)]  the templated rewrite prompts
"""
from .targets import contexts, key_star, keys_at

__all__ = ["contexts", "key_star", "keys_at"]
