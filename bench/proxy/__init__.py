"""The registry proxy measured (registry), while fills trickle (registry_fills), with
big indexes (registry_indexes), behind the HTTP front against uvicorn alone (registry_server),
and the HTTP servers that were candidates for the front, served and attacked alike
(registry_candidates, with the servers registry_server does not start in
registry_candidate_servers).
"""
