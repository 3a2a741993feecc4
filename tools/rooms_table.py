"""The rename table of tools/rooms.py (issue 39): what moves where, what stays, and what
each room holds.  Edit this file to place a module; rooms.py does the moving.

``MOVES`` maps repository paths, old -> new; ``_room`` builds a room's entries (``old:new``
renames a module as it moves).  ``OPTIONAL``: modules other branches add, moved when there.
``STAYS``: per roomed package, the modules that stay at its top (any other stops the run).
``ROOMS``: each room's ``__init__`` docstring, written when the room is made.
``ANCHORED``: files that measure against an old commit's layout (bench/gitanchor.py): their
paths name the old tree and are not rewritten.
"""

from __future__ import annotations

SRC = "src/hetflow"


def _room(package: str, room: str, modules: str) -> dict[str, str]:
    """``package``'s modules (space separated; ``old:new`` renames one) into ``package/room``."""
    out = {}
    for m in modules.split():
        old, _, new = m.partition(":")
        out[f"{package}/{old}.py"] = f"{package}/{room}/{new or old}.py"
    return out


MOVES: dict[str, str] = {
    # spec: models.py stays at the top, the contract users write against
    **_room(f"{SRC}/spec", "fields", "units resources retry checkpoint batch elastic imageref naming"),
    **_room(f"{SRC}/spec", "source", "yamlfile problems templated"),
    **_room(f"{SRC}/spec", "expansion", "fanout matrix"),
    **_room(f"{SRC}/spec", "validate", "checks dag when"),
    **_room(f"{SRC}/spec", "load", "loader params overrides templates wfcommons"),
    # registry: settings, errors, machines stay
    **_room(f"{SRC}/registry", "cache", "store verify fetch fillwatch upstream"),
    **_room(f"{SRC}/registry", "matching", "views viewcache offload"),
    **_room(f"{SRC}/registry", "server", "app proxy gates auth peers documents serving"),
    **_room(f"{SRC}/registry", "fakes", "fake fakeindexes fakeproxy faults trickle"),
    # state: store, models, events, parsecache stay
    **_room(
        f"{SRC}/state",
        "rows",
        "schema leases attemptrows:attempts datarows:data inputrows:inputs publishrows:published"
        " slowdownrows:slowdowns pages",
    ),
    **_room(f"{SRC}/state", "guards", "busy integrity private liveness"),
    # plan: build, cost, explanation, gpuspec, instance, profile, stored stay
    **_room(f"{SRC}/plan", "feasible", "filters images gangs"),
    **_room(f"{SRC}/plan", "checking", "validate simulator"),
    **_room(f"{SRC}/plan", "onemachine", "local choose gpupick steer"),
    # cli: main, common, flags, helptext, shell, ui stay
    **_room(f"{SRC}/cli", "run", "runs logs moves record doctor cache"),
    **_room(f"{SRC}/cli", "planning", "plan slowdown"),
    **_room(f"{SRC}/cli", "oci", "images registry"),
    # inventory: models, cpu, probe, profiles, sharing stay
    **_room(f"{SRC}/inventory", "gpus", "nvml nvmlmig nvmlusage procfs amd intel gpumodels"),
    **_room(f"{SRC}/inventory", "fakes", "fakegpus:gpus fakedevnodes:devnodes fakenvml:nvml"),
    # images: errors, oci, reference, service, layout, localimages stay
    **_room(f"{SRC}/images", "matching", "match nodecheck gpumatch requirements"),
    **_room(f"{SRC}/images", "distribution", "client config fake index_build"),
    # execute/run: the loop and the attempts stay; choosing what runs goes to dispatching/
    **_room(f"{SRC}/execute/run", "dispatching", "dispatch decisions cachepass growth"),
    # execute/data
    **_room(
        f"{SRC}/execute/data",
        "publishing",
        "publish publishhost:host publishjournal:journal publishrule:rule publishs3:s3",
    ),
    # execute/backends/slurm: the shell a job script is made of
    **_room(f"{SRC}/execute/backends/slurm", "script", "cgroup devices publish usage"),
    # bench: gitanchor and ui stay
    **_room("bench", "planning", "planner planner_saga planscale sharing virtual gang gang_online"),
    **_room(
        "bench", "local", "overhead launch throughput cachedrerun scale batchitem loader checkpoint checkpoint_report"
    ),
    "bench/ckptwork.c": "bench/local/ckptwork.c",
    **_room("bench", "peers", "snakepeer"),
    **_room("bench", "engines", "kubernetes kube_hetflow ray slurm slurmpack"),
    **_room("bench", "proxy", "registry registry_fills registry_indexes registry_server"),
    # demo: clusters, hwmatch*, ui stay
    **_room(
        "demo",
        "kube",
        "kube_cluster:cluster kube_demo:demo kube_kubelet:kubelet kube_kwok:kwok kube_objects:objects"
        " kube_processes:processes",
    ),
    **_room("demo", "slurm", "slurm_cluster:cluster slurm_nodes:nodes"),
}

# Modules other branches add, placed when they are there (registry/serving.py keeps its name).
OPTIONAL = {f"{SRC}/registry/serving.py", "bench/registry_server.py"}

# The modules that stay at the top of each roomed package.
STAYS: dict[str, str] = {
    f"{SRC}/spec": "models",
    f"{SRC}/registry": "settings errors machines",
    f"{SRC}/state": "store models events parsecache",
    f"{SRC}/plan": "build cost explanation gpuspec instance profile stored",
    f"{SRC}/cli": "main common flags helptext shell ui",
    f"{SRC}/inventory": "models cpu probe profiles sharing",
    f"{SRC}/images": "errors oci reference service layout localimages source",
    f"{SRC}/execute/run": "attempts batching conditions engineview executor lostattempts notify options retries runner",
    f"{SRC}/execute/data": "cache diskfull fanlist fanout fencing inputs outputs paths watch",
    f"{SRC}/execute/backends/slurm": "backend checkpoint client gang gres jobfiles plugin queue settings translate",
    "bench": "gitanchor ui registry_candidates registry_candidate_servers",
    "demo": "clusters hwmatch hwmatch_services hwmatch_steps ui",
}

# Each room's __init__ docstring: what it holds, read top to bottom.
ROOMS: dict[str, str] = {
    f"{SRC}/spec/fields": "The parts a step is written with: quantities (units), what it asks of a machine\n"
    "(resources), its retry policy, checkpoint and stop grace, batch, elastic gang, image\n"
    "references, and how step and data names are spelled (naming).  ``models`` builds them into\n"
    "a workflow; none of them reads a file.",
    f"{SRC}/spec/source": "The workflow file as text: YAML with the line of every key (yamlfile), problems\n"
    "as ``file:line: what to change`` (problems), and the fields of a step that take ``{{ ... }}``\n"
    "templates (templated).",
    f"{SRC}/spec/expansion": "Fan-out: a step with ``foreach`` or ``matrix`` becomes one step per item\n"
    "(fanout), a matrix's axes and exclusions (matrix).",
    f"{SRC}/spec/validate": "Checks of a whole workflow that no single model can make: the DAG (dag),\n"
    "data paths, names and env (checks), and ``when:`` conditions (when).",
    f"{SRC}/spec/load": "Loading a workflow, in the order a file is read: YAML and pydantic (loader),\n"
    "``-p`` params and ``{{ params.NAME }}`` (params), resources given from outside (overrides),\n"
    "step templates and ``include:`` (templates); and WfCommons traces converted (wfcommons).",
    f"{SRC}/registry/cache": "Content on the proxy's disk and how it gets there: the content-addressed store\n"
    "(store), content sent only when it hashes to its digest (verify), the upstream registry's\n"
    "side (upstream), fills from upstream (fetch) and when a fill must end (fillwatch).",
    f"{SRC}/registry/matching": "A machine type's view of an image index, the one build it should pull\n"
    "(views), matched once off the event loop and kept (viewcache), and big documents' pure\n"
    "work in a worker process (offload).",
    f"{SRC}/registry/server": "The proxy as a service: the ASGI app (app), its OCI endpoints (proxy), the\n"
    "gates in front of it (gates), token auth (auth), who is on a loopback connection (peers),\n"
    "manifest bodies checked against their media types (documents), and serving it (serving).",
    f"{SRC}/registry/fakes": "Fakes for tests and the bench: an in-memory upstream registry (fake), big\n"
    "generated indexes (fakeindexes), a faulty upstream (faults), a trickling one over HTTP\n"
    "(trickle), and a proxy in a process of its own (fakeproxy).",
    f"{SRC}/state/rows": "The SQL behind ``Store``, one table family per module, each mixed into the one\n"
    "connection: the tables (schema), GPU leases (leases), attempts and history (attempts), a\n"
    "run's data (data), what each attempt's inputs were (inputs), publishing (published),\n"
    "GPU-sharing slowdowns (slowdowns), and the dashboard's reads (pages).",
    f"{SRC}/state/guards": "What keeps the store sound: waiting out a busy store (busy), checking it is\n"
    "whole and its disk not full (integrity), keeping it its user's alone (private), and telling\n"
    "a live executor from a gone one (liveness).",
    f"{SRC}/plan/feasible": "Can a variant run there?  The feasibility filters (filters), the image\n"
    "compatibility filter (images), and gang steps' run-time model (gangs).",
    f"{SRC}/plan/checking": "Checking a plan: every violation as a sentence (validate), and a replay in a\n"
    "discrete-event simulation with noisy run times (simulator).",
    f"{SRC}/plan/onemachine": "Planning a run on this one machine: the planner for the local runner\n"
    "(local), variant choice when a qualifying GPU is free (choose), which GPUs a step gets\n"
    "(gpupick), and ``--variant`` from the command line (steer).",
    f"{SRC}/cli/run": "The commands of a run: run, resume, ps, show, stop (runs); logs (logs); trace and\n"
    "report (record); migrate and drain (moves); doctor (doctor); the cross-run cache (cache).",
    f"{SRC}/cli/planning": "The planning commands: plan, simulate, cluster plan, profile show, import\n"
    "wfcommons (plan); profile slowdown (slowdown).",
    f"{SRC}/cli/oci": "The commands that speak to registries: images inspect, resolve, build-index (images);\n"
    "registry serve and login (registry).",
    f"{SRC}/inventory/gpus": "GPU probes, one per source: NVML (nvml) with its MIG instances (nvmlmig) and\n"
    "current use (nvmlusage), ``/proc/driver/nvidia`` (procfs), AMD's KFD (amd), Intel's DRM\n"
    "(intel), and the GPU model table they share (gpumodels).",
    f"{SRC}/inventory/fakes": "Fake GPUs for a machine without them: from configuration (gpus), their\n"
    "device nodes and MIG instances (devnodes), and a fake pynvml for tests (nvml).",
    f"{SRC}/images/matching": "Which build in an image index suits a node, pure: the builds' requirements\n"
    "(requirements), one build checked against a node (nodecheck), AMD and Intel needs\n"
    "(gpumatch), and the choice (match).",
    f"{SRC}/images/distribution": "The OCI distribution API: the client (client), an image's config blob\n"
    "(config), an in-memory registry for tests (fake), and multi-build indexes assembled from\n"
    "per-build tags (index_build).",
    f"{SRC}/execute/run/dispatching": "Choosing what runs at the runner's turn: for a ready step which\n"
    "variant, where and with which GPUs (dispatch), the answers kept within one turn\n"
    "(decisions), the cross-run cache taken at the turn (cachepass), and elastic gangs grown\n"
    "on this machine (growth).",
    f"{SRC}/execute/data/publishing": "Publishing a step's outputs when it succeeds: the publish set\n"
    "(publish), what may be replaced (rule), the journal written before a target is touched\n"
    "(journal), and each target kind: a host folder (host), an S3 prefix (s3).",
    f"{SRC}/execute/backends/slurm/script": "The shell a Slurm job script is made of: keeping the\n"
    "container in the job's cgroup (cgroup), the GPUs Slurm assigned (devices), what the\n"
    "container used (usage), and moving outputs into place before it ends 0 (publish).",
    "bench/planning": "Planner benchmarks: the planner on the shared workloads (planner, planner_saga),\n"
    "at scale (planscale), GPU sharing (sharing), virtual clusters (virtual), and gangs (gang,\n"
    "gang_online).",
    "bench/local": "The local runner's costs: launch overhead (overhead, launch), issue 26's throughput\n"
    "(throughput, cachedrerun, scale, batchitem), loading (loader), and checkpoints\n"
    "(checkpoint, checkpoint_report).",
    "bench/peers": "hetflow against its peers on the same workloads: Snakemake (snakepeer).",
    "bench/engines": "The queueing engines' overhead: Kubernetes (kubernetes, kube_hetflow), Ray (ray),\n"
    "Slurm (slurm, slurmpack).",
    "bench/proxy": "The registry proxy measured (registry), while fills trickle (registry_fills), with\n"
    "big indexes (registry_indexes), behind the HTTP front (registry_server).",
    "demo/kube": "A local Kubernetes test cluster on this one machine (cluster): what it writes\n"
    "before it starts (objects), kwok's configuration (kwok), a real node (kubelet), its\n"
    "processes (processes); and ``make demo-kubernetes`` on it (demo).",
    "demo/slurm": "A local Slurm test cluster on this one machine (cluster) and its fake nodes\n(nodes).",
}

# Files that measure against an old commit's layout: only their import lines are rewritten.
ANCHORED = {"bench/gitanchor.py", "tests/unit/test_bench_gitanchor.py", "bench/local/loader.py", "bench/loader.py"}
# Files never rewritten: records of past runs.
SKIP_UNDER = ("docs/gpu-runs/",)
# Tables keyed by module names relative to a package, besides every __init__ that calls lazy_names.
FACADE_TABLES = {f"{SRC}/cli/main.py": "hetflow.cli"}
