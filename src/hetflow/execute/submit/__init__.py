"""Submitting: from a workflow file to a recorded run, and back to one that can run again.

Read top to bottom, ``session.submit_run`` is the pipeline: the data resolved and hashed
(``data.inputs``) -> fan-outs over it expanded (``data.fanout``) -> images pinned to this
machine's builds (``pin``) -> the checks that refuse a run (``record.preflight``) -> the plan
(``prepare``) -> the run recorded with its plan (``record.create_run``, ``runplan``).  The
local/cluster difference is named once, in ``session``: a local run pins and plans on this
machine; a cluster run asks its backend and plans on the cluster file.  ``open_run`` reads a
recorded run back; ``resume_run`` applies an edited workflow file (``amend``) and the data as it
is now (``rehash``) first.  ``preview`` is the dry run: the same pipeline, nothing recorded;
``checkrun`` is validate's: every refusal of that pipeline at once.
"""
