"""The registry proxy measured (registry), while fills trickle (registry_fills), with
big indexes (registry_indexes), behind the HTTP front (registry_server).
"""
