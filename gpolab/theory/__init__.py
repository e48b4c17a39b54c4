"""Closed forms used by tests and figure overlays."""
