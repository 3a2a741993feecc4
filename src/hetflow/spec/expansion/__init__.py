"""Fan-out: a step with ``foreach`` or ``matrix`` becomes one step per item
(fanout), a matrix's axes and exclusions (matrix).
"""
