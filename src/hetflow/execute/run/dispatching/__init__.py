"""Choosing what runs at the runner's turn: for a ready step which
variant, where and with which GPUs (dispatch), the answers kept within one turn
(decisions), the cross-run cache taken at the turn (cachepass), and elastic gangs grown
on this machine (growth).
"""
