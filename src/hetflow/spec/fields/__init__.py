"""The parts a step is written with: quantities (units), what it asks of a machine
(resources), its retry policy, checkpoint and stop grace, batch, elastic gang, image
references, and how step and data names are spelled (naming).  ``models`` builds them into
a workflow; none of them reads a file.
"""
