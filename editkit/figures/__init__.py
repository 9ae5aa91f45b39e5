"""Plotly figure builders for the pages (no Streamlit): figures/editing.py for edit comparisons."""
