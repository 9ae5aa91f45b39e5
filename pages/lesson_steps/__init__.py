"""The Lesson page's pieces (pages/lesson.py is the page): one module per step, each declaring its `STEP`,
collected in order by `registry.py`; the session-state keys (`keys.py`); what every step shares (`shared.py`,
`asking.py`, `cells.py`, `targets.py`); the sidebar and the teacher's view. Nothing here runs a Streamlit
command when imported."""
