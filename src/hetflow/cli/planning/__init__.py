"""The planning commands: plan, simulate, cluster plan, profile show, import
wfcommons (plan); profile slowdown (slowdown).
"""
