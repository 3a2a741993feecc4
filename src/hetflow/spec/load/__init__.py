"""Loading a workflow, in the order a file is read: YAML and pydantic (loader),
``-p`` params and ``{{ params.NAME }}`` (params), resources given from outside (overrides),
step templates and ``include:`` (templates); every problem of a file in one pass, its sound
steps built all the same, for validate (salvage); and WfCommons traces converted (wfcommons).
"""
