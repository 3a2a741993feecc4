"""Checking a plan: every violation as a sentence (validate), and a replay in a
discrete-event simulation with noisy run times (simulator).
"""
