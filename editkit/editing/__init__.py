"""Locate-then-edit methods (ROME, MEMIT, PMET) and the machinery they share."""
