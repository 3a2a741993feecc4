"""The commands of a run: run, resume, ps, show, stop (runs); logs (logs); trace and
report (record); migrate and drain (moves); doctor (doctor); the cross-run cache (cache).
"""
