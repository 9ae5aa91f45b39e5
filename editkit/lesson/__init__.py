"""A guided lesson for a class: locate a fact, edit it, re-trace it, check the side effects.

- facts.py: the lesson's facts (the request records `edit` and `evaluate --set` read) and their new targets;
- compute.py: every computation of the lesson (the only module here that calls tracing/, editing/, evaluation/);
- pack.py / build.py: a class pack (all results, computed once, JSON files) and its resumable builder;
- grading.py: each step's question, the check of a student's answer and its feedback;
- classroom.py: the class's answers per step (SQLite, anonymous counts) and a student's own answers as CSV / JSON.
"""
