"""The launch path: from a ready step and a dispatch decision to a started container.

``launcher`` (``Launcher``) stages a step attempt (inputs linked, outputs folder, the cache
consulted), builds its containers and hands them to the backend as one ``Job``, a gang's
replicas included; ``container`` builds one attempt's ``ContainerSpec`` (a pure function of
the step, variant and run), its GPUs given by ``execute.devices``.  The container engine itself
(``execute.engine``) and the backends (``execute.backends``) start what is built here.
"""
