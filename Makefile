# hetflow: `make demo` and `make test` install what they need (as root on Debian 12),
# and both are safe to run twice.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
HETFLOW := $(VENV)/bin/hetflow
APT_PACKAGES := podman runc crun busybox-static debootstrap python3-venv python3-pip ca-certificates \
	gcc libc6-dev docker-registry skopeo slurm-wlm munge \
	netavark aardvark-dns iptables openssh-client chromium chromium-driver containerd containernetworking-plugins iproute2 \
	haproxy slowhttptest wrk
export HETFLOW_HOME ?= $(CURDIR)/.hetflow
# pytest-xdist workers for make test, unit and integration (see test:)
PYTEST_WORKERS ?= 3

.PHONY: docs bench-cli test-quick bench-tes snakemake-tes-venv deps install kube criu demo demo-slurm demo-ray demo-kubernetes test lint unit integration chaos race fuzz bench images clean ui-vendor gpu-kit tes-compliance-venv cwl-images conformance

# netavark + aardvark-dns: gang networks (podman network create --internal) with DNS for
# container names; netavark sets them up with iptables (without it every container on such a
# network fails: "netavark: No such file or directory"); openssh-client: ssh-keygen makes
# each MPI gang's keys.  haproxy: the HTTP front the registry proxy and the dashboard run
# behind (hetflow.front); slowhttptest and wrk: its attack tests and bench.proxy.registry's rows.
deps:  ## system packages: podman + runc (see src/hetflow/share/containers.conf), busybox, debootstrap
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root (or install:$$missing)"; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cwl,docs]'
	@touch $@

# Byte-compile the sources as pip does for an installed package: with PYTHONDONTWRITEBYTECODE set
# (as on the CI machines) an editable checkout otherwise recompiles every changed module in
# every hetflow process, about 0.2 s of CPU a command (issue 43). Up-to-date files are skipped.
install: deps $(VENV)/.installed
	@$(PY) -m compileall -q src bench demo tools/gpu_check >/dev/null

images: install
	$(PY) -m demo.images

# A fake node with one of each: a time-sliced A100, an H100 in MIG mode, an AMD MI250X.
ACCEL = HETFLOW_FAKE_GPUS='a100:1,h100:1:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb,mi250x:1' HETFLOW_GPU_SHARING=time-slicing:4

demo: install images
	$(HETFLOW) nodes
	$(HETFLOW) run examples/meanpool/workflow.yaml
	$(HETFLOW) run examples/circuit/workflow.yaml
	$(HETFLOW) plan examples/circuit/workflow.yaml --cluster examples/clusters/hetero-16.yaml --gantt $(HETFLOW_HOME)/circuit-plan.svg
	$(PY) -m demo.hwmatch
	@echo "== fan-out over host files, gathered and published to examples/wordcount/results/"
	$(HETFLOW) run examples/wordcount/workflow.yaml
	@echo "== the same workflow again: every step's result comes from the cross-run cache"
	$(HETFLOW) run examples/wordcount/workflow.yaml
	$(HETFLOW) cache ls
	$(HETFLOW) report $$($(HETFLOW) ps --all --json | $(PY) -c 'import json, sys; print(json.load(sys.stdin)[1]["id"])') \
		-o $(HETFLOW_HOME)/wordcount-report.html
	@echo "report of the first wordcount run: $(HETFLOW_HOME)/wordcount-report.html"
	@echo "== gang steps: two replicas started together on a private network; each rank's result"
	$(HETFLOW) run --no-cache examples/gang/workflow.yaml  # the ranks' output is the point: run them every time
	@rid=$$($(HETFLOW) ps --all --json | $(PY) -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])'); \
	for r in 0 1; do echo "-- torch (torchrun contract), rank $$r:"; $(HETFLOW) logs $$rid torch --rank $$r; done; \
	echo "-- mpi (mpirun in replica 0 over ssh to replica 1), every rank:"; $(HETFLOW) logs $$rid mpi
	@echo "== GPU topology of a fake node (no GPU here: FAKE), as nvidia-smi topo -m shows it"
	HETFLOW_FAKE_GPUS=a100:4:nvlink-pairs $(HETFLOW) nodes --topo
	@echo "== gangs planned on a cluster of NVLink and PCIe-only nodes"
	$(HETFLOW) plan examples/gang/train.yaml --cluster examples/clusters/nvlink-mixed.yaml
	@echo "== accelerators in every shape, on FAKE devices (no GPU here): a mixed node as the vendor tools show it"
	$(ACCEL) $(HETFLOW) nodes
	@echo "== 8 small steps share a time-sliced GPU (4 at a time), one runs on a MIG 1g.10gb slice, one on the AMD GPU"
	$(ACCEL) $(HETFLOW) run --no-cache examples/accelerators/workflow.yaml
	@rid=$$($(HETFLOW) ps --all --json | $(PY) -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])'); \
	for s in embed.0 embed.1 slice rocm; do $(HETFLOW) logs $$rid $$s; done
	@echo "== the same workflow planned on a cluster of time-sliced, MIG, AMD and Intel nodes"
	$(HETFLOW) plan examples/accelerators/workflow.yaml --cluster examples/clusters/accelerators.yaml --explain
	@echo "== the live dashboard over these runs (hetflow ui; it keeps serving after make returns)"
	$(PY) -m demo.ui

demo-slurm: install images  ## a local Slurm cluster (munge, slurmctld, two slurmd with fake GPUs) runs circuit
	$(PY) -m demo.clusters slurm

demo-ray: install images  ## a local Ray cluster of two nodes runs circuit
	$(PY) -m demo.clusters ray

# The Kubernetes test control plane (kube-apiserver, -controller-manager, -scheduler, etcd, kwok),
# built once from Go modules into /var/cache/hetflow/kube (tools/kube/build: cached after).
kube:
	tools/kube/build

# CRIU 4.1.1 (Debian 12's 3.17 fails on this kernel: tools/build-criu says why) as
# $(VENV)/libexec/hetflow/criu, where hetflow looks for it (checkpoint: on a step).
criu:
	tools/build-criu $(VENV)

demo-kubernetes: install images kube  ## a local Kubernetes control plane: kwok GPU nodes planned on, then circuit as real pods on a kubelet
	$(PY) -m demo.kube.demo

# The real-GPU acceptance kit (docs/guides/real-gpu.md): what a bare GPU machine lacks for
# tools/gpu-check, in ./gpu-kit (git-ignored, under 64 MiB), verified by `tools/gpu-check --dry-run`.
gpu-kit: install criu
	PY=$(PY) tools/gpu-kit/build gpu-kit

lint: install
	$(VENV)/bin/ruff check src tests bench demo tools/gpu-check tools/gpu_check tools/archtree.py tools/rooms.py tools/rooms_table.py tools/docref tools/docs_nav.py
	$(VENV)/bin/ruff format --check src tests bench demo tools/gpu-check tools/gpu_check tools/archtree.py tools/rooms.py tools/rooms_table.py tools/docref tools/docs_nav.py
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: install
	$(PY) -m pytest tests/unit -q -n $(PYTEST_WORKERS) --dist loadfile

integration: install criu tes-compliance-venv
	$(PY) -m pytest tests/integration -q -n $(PYTEST_WORKERS) --dist loadfile

# The GA4GH TES compliance suite (third_party/tes/openapi-test-runner) pins pydantic 1 and an
# old requests, so it lives in a venv of its own; tests/integration/test_tes_compliance.py
# runs it against `hetflow tes serve` (it is skipped, saying why, where this venv is missing).
TES_VENV := build/tes-compliance-venv
tes-compliance-venv: $(TES_VENV)/.installed
$(TES_VENV)/.installed: third_party/tes/openapi-test-runner/requirements.txt
	@test -x $(TES_VENV)/bin/python || python3 -m venv $(TES_VENV)
	$(TES_VENV)/bin/pip install -q -r third_party/tes/openapi-test-runner/requirements.txt
	cp -r third_party/tes/openapi-test-runner $(TES_VENV)/src && $(TES_VENV)/bin/pip install -q $(TES_VENV)/src
	touch $@

# `make test` (and `make unit`) run the short fuzz (5,000 cases) and the input suite; this
# is the long run: 12,000 generated cases, derandomized (HETFLOW_FUZZ_SEED=N for others).
fuzz: install
	HETFLOW_FUZZ_EXAMPLES=$${HETFLOW_FUZZ_EXAMPLES:-12000} $(PY) -m pytest tests/unit/test_fuzz_input.py \
		tests/unit/test_input_hostile.py -q --timeout=1800 --hypothesis-show-statistics

# Three workers, each taking whole test files (--dist loadfile: a file's module-scoped Slurm,
# Ray or Kubernetes cluster stays with one worker): the integration tests mostly wait on
# containers and clusters, and their hetflow commands fork from a server that imported
# hetflow once (tests/integration/forkserver.py). Four workers took 15-16 minutes against
# 18, but at load 17 the slow-client tests' latency bound failed: three are kept.
# Every test keeps its own HETFLOW_HOME and names, so workers never see each other's runs.
test: install lint kube criu tes-compliance-venv snakemake-tes-venv
	$(PY) -m pytest tests -q -ra -n $(PYTEST_WORKERS) --dist loadfile

# The quick check before a push (issue 43): the unit suite, the local backend's whole contract
# (real podman containers) and one smoke test of each cluster backend (a job submitted to the
# local Slurm, Ray and Kubernetes clusters runs and reports its exit code). The input fuzzer runs
# 1,000 of its cases here (make test runs all 5,000: about 250 s of test time, a third of this).
QUICK_TESTS := tests/unit tests/integration/test_backend_local.py \
	tests/integration/test_backend_slurm.py::TestSlurmBackend::test_submit_runs_and_reports_exit_code \
	tests/integration/test_backend_ray.py::TestRayBackend::test_submit_runs_and_reports_exit_code \
	tests/integration/test_backend_kubernetes.py::TestKubernetesBackend::test_submit_runs_and_reports_exit_code
test-quick: install kube
	time HETFLOW_FUZZ_EXAMPLES=$${HETFLOW_FUZZ_EXAMPLES:-1000} $(PY) -m pytest $(QUICK_TESTS) -q -ra \
		-n $(PYTEST_WORKERS) --dist loadfile

# kill -9 of every hetflow process of a 200-step run at 20 seeded random points, each followed
# by resume (`make test` runs the short 30-step, 4-kill version); HETFLOW_CHAOS_SEED=N repeats one.
chaos: install images
	HETFLOW_CHAOS_STEPS=$${HETFLOW_CHAOS_STEPS:-200} HETFLOW_CHAOS_KILLS=$${HETFLOW_CHAOS_KILLS:-20} \
		$(PY) -m pytest tests/integration/test_chaos.py -q -s

# issue 30's race, widened on purpose: a chain of 20 steps, each reading its parent's output, run
# 10 times on the local Slurm cluster (the executor polling every 8 s, so Slurm starts each child
# long before hetflow sees its parent end) and 10 times on the local Ray cluster; every step must
# succeed on its first attempt (`make test` runs one chain of 5 on each).
race: install images
	HETFLOW_RACE_STEPS=$${HETFLOW_RACE_STEPS:-20} HETFLOW_RACE_REPEATS=$${HETFLOW_RACE_REPEATS:-10} \
		$(PY) -m pytest tests/integration/test_run_slurm.py tests/integration/test_run_ray.py -q -k chain_never

bench: install images kube criu
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.local.overhead
	$(PY) -m bench.planning.planner
	$(PY) -m bench.planning.virtual
	$(PY) -m bench.engines.slurm
	$(PY) -m bench.engines.ray
	$(PY) -m bench.engines.kubernetes
	$(PY) -m bench.engines.kube_hetflow
	$(PY) -m bench.local.loader
	$(PY) -m bench.local.scale
	$(PY) -m bench.local.throughput
	$(PY) -m bench.planning.gang
	$(PY) -m bench.planning.sharing
	$(PY) -m bench.ui
	$(PY) -m bench.local.checkpoint

# Local stand-ins for the Docker Hub images the CWL conformance tests name (docker.io/debian:stable-slim,
# python:3-slim, bash:4.4, alpine:latest), from Debian packages and busybox: docs/guides/cwl.md.
cwl-images: install
	$(PY) -m bench.conformance.images

# The CWL v1.2 conformance suite (third_party/cwl-v1.2) through cwltest against hetflow-cwl-runner and
# against cwltool --podman (the anchor) in the same run: a table of passed/failed/unsupported per tag,
# and build/conformance/summary.json.  A short run: make conformance CWL_ARGS='--tags required' (or
# '-n 1-20', '-s NAME,...'); CWL_ARGS=--check fails unless hetflow passes every required test and 95%.
conformance: install cwl-images
	$(PY) -m pip install -q -e '.[conformance]'
	$(PY) -m bench.conformance --no-images $(CWL_ARGS)

# Snakemake 9 through `hetflow tes serve` (tests/integration/test_tes_snakemake.py,
# docs/guides/tes-snakemake.md): Snakemake and its TES executor plugin in a venv of their own (the
# plugin pins py-tes 0.4.2, which needs six beside it; hetflow's test extra has py-tes 1.x), and the
# image its tasks run in (Snakemake + the S3 storage plugin on the Debian base; built once per machine).
SNAKE_TES_VENV := build/snakemake-tes-venv
snakemake-tes-venv: $(SNAKE_TES_VENV)/.installed install
	$(PY) -m demo.images --snakemake
$(SNAKE_TES_VENV)/.installed:
	@test -x $(SNAKE_TES_VENV)/bin/python || python3 -m venv $(SNAKE_TES_VENV)
	$(SNAKE_TES_VENV)/bin/pip install -q snakemake==9.27.1 snakemake-executor-plugin-tes==0.1.3 py-tes==0.4.2 six \
		snakemake-storage-plugin-s3==0.3.6
	touch $@

# issue 41's figure: 1,000 tasks by py-tes (16 threads) through hetflow tes serve, and the same
# containers by a 2-worker podman loop in the same run (TES_ARGS='--tasks 50' for a short run)
bench-tes: install
	$(PY) -m bench.tes $(TES_ARGS)

# The documentation site (issue 42): the reference pages from the code (python -m tools.docref), then
# mkdocs, strict (a warning, a broken link or anchor fails it), offline, into build/site;
# `.venv/bin/mkdocs serve` serves it while you edit.
docs: install
	$(PY) -m tools.docref
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site
	@echo "the site: build/site/index.html (opens from file://, search included)"

# issue 43's figures: validate, plan, run --dry-run, ps, show, logs, trace, cache ls, nodes and
# TAB completion on a 20-step workflow and a store of 1,000 runs (median of 5 subprocess runs
# each, beside podman ps and git status in the same run); CLI_ARGS='--repeat 3 --runs 200' is shorter
bench-cli: install images
	$(PY) -m bench.cli $(CLI_ARGS)

clean:
	rm -rf $(VENV) .hetflow .pytest_cache .mypy_cache .ruff_cache gpu-kit

# The dashboard's JavaScript libraries (dagre, Chart.js) are committed under src/hetflow/share/ui/vendor/;
# this fetches exactly the same versions from npm again (needs node + npm and the network). Nothing depends on it.
ui-vendor:
	tools/vendor-ui.sh
