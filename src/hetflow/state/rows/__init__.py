"""The SQL behind ``Store``, one table family per module, each mixed into the one
connection: the tables (schema), GPU leases (leases), attempts and history (attempts), a
run's data (data), what each attempt's inputs were (inputs), publishing (published),
GPU-sharing slowdowns (slowdowns), and the dashboard's reads (pages).
"""
