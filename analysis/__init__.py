"""Measurement: what runs wrote and what models do, as numbers, tables and figures.

Nothing here trains a model, builds a corpus, starts a process or keeps an artifact store; that is
`reproduce/`, which imports this package and never the other way round (`tests/test_architecture.py`).
"""
