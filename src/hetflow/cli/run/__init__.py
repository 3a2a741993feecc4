"""The commands of a run: run, resume, ps, show, stop (runs; a CWL file's run: cwlrun); logs
(logs); trace and report (record); migrate and drain (moves); doctor (doctor); the cross-run
cache (cache).
"""
