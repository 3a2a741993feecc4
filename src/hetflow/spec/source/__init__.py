"""The workflow file as text: YAML with the line of every key (yamlfile), problems
as ``file:line: what to change`` (problems), and the fields of a step that take ``{{ ... }}``
templates (templated).
"""
