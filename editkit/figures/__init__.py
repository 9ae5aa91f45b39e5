"""Plotly figures and tables built from JSON results, for the pages, notebooks and tests (no Streamlit here; the
only package that imports plotly): editing.py (an edit comparison), tracing.py (traces, severing, AIE),
side_effects.py (sweep, bleed map, layer sweep), lifelong.py (lifelong-editing curves), spectrum.py (AlphaEdit's
null space), lens.py, memories.py and similarity.py (the home, FFN memories and Attention vs FFN pages)."""
from . import notebook  # noqa: F401,E402 - registers how results show their figures offline (notebook.py)
