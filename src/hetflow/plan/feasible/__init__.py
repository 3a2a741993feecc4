"""Can a variant run there?  The feasibility filters (filters), the image
compatibility filter (images), and gang steps' run-time model (gangs).
"""
