"""Fakes for tests and the bench: an in-memory upstream registry (fake), big
generated indexes (fakeindexes), a faulty upstream (faults), a trickling one over HTTP
(trickle), and a proxy in a process of its own (fakeproxy).
"""
