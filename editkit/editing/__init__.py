"""Locate-then-edit methods (every method registered in methods/) and the machinery they share."""
