"""Checks of a whole workflow that no single model can make: the DAG (dag),
data paths, names and env (checks), and ``when:`` conditions (when).
"""
