"""Checks of a whole workflow that no single model can make: the DAG (dag),
data paths, names and env (checks), ``when:`` conditions (when), and a credential written
into ``env:`` instead of ``secrets:`` (envsecrets).
"""
