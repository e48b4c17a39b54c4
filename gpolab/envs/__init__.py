"""Surrogate environments: parameters as data, sampling as pure functions, exact truth beside it."""
