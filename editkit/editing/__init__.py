"""Locate-then-edit methods (ROME, MEMIT, PMET, AlphaEdit: methods/) and the machinery they share."""
