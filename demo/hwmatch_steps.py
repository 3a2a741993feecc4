"""The hwmatch demo's steps (``Demo``): build, push and index, resolve per machine, a plain
pull, pulls through the proxy, a workflow run; each prints the commands as a user would type them."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.hwmatch_services import DemoError, Service, free_port, port_taken, start_registry, wait_ready
from demo.images import HWMATCH_BUILDS, build_hwmatch_images
from hetflow.config import engine_env, find_engine
from hetflow.errors import HetflowError

REPO = "hetflow-examples/whichbuild"  # in the loopback registry
TEMPLATE = "hwmatch/workflow.yaml.in"  # relative to the examples dir
PLACEHOLDER = "${REGISTRY}"
# machine description (a built-in profile of hetflow.inventory.profiles) -> the build
# (the name whichbuild prints) it must get
MACHINES: dict[str, str] = {"x86-64-v2": "generic", "haswell-cpu": "v3", "a100-node": "gpu-sm80"}
BUILD_NAMES = {b.tag: b.name for b in HWMATCH_BUILDS}


def render_workflow(template: str, registry: str) -> str:
    """The workflow text with ``${REGISTRY}`` replaced by ``registry`` (HOST:PORT)
    outside comments, under a comment saying so."""
    lines = template.splitlines(keepends=True)
    if not any(PLACEHOLDER in line for line in lines if not line.lstrip().startswith("#")):
        raise DemoError(f"the workflow template has no {PLACEHOLDER} to fill in")
    head = f"# Written by `python -m demo.hwmatch` from examples/{TEMPLATE} with {PLACEHOLDER} = {registry}.\n"
    body = "".join(line if line.lstrip().startswith("#") else line.replace(PLACEHOLDER, registry) for line in lines)
    return head + body


def _hetflow_argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "hetflow.cli.main", *args]


@dataclass
class Demo:
    workdir: Path
    examples: Path
    registry_port: int = 0
    proxy_port: int = 0
    services: list[Service] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)  # image names to untag at the end
    digests: dict[str, str] = field(default_factory=dict)  # build tag -> manifest digest
    here: str = ""  # the digest of this machine's build
    here_node: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # podman with hetflow's containers.conf; wide rich tables in captured output.
        self.env = engine_env()
        self.env.setdefault("COLUMNS", "150")
        self.podman = find_engine()

    # printing ---------------------------------------------------------------------

    @staticmethod
    def section(title: str) -> None:
        print(f"\n=== {title} " + "=" * max(3, 76 - len(title)), flush=True)

    @staticmethod
    def say(text: str) -> None:
        print(text, flush=True)

    def sh(
        self,
        shown: Sequence[str],
        argv: Sequence[str] | None = None,
        *,
        what: str,
        echo: bool = True,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Print ``$ shown``, run ``argv`` (default: shown), print its output (stdout
        and stderr as they came), and return it; a failure is a DemoError that says
        what was being done."""
        print("$ " + shlex.join(shown), flush=True)
        try:
            done = subprocess.run(
                list(argv or shown),
                env=dict(env or self.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise DemoError(f"{what}: {exc.filename} is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise DemoError(f"{what}: `{shlex.join(shown)}` ran past {timeout:.0f}s") from exc
        output = done.stdout.rstrip()
        if output and (echo or done.returncode != 0):
            print(output, flush=True)
        if done.returncode != 0:
            raise DemoError(f"{what}: `{shlex.join(shown)}` exited {done.returncode}")
        return done.stdout

    def hetflow(self, *args: str, what: str, echo: bool = True, timeout: float = 300) -> str:
        return self.sh(["hetflow", *args], _hetflow_argv(args), what=what, echo=echo, timeout=timeout)

    def _json(self, *args: str, what: str) -> Any:
        """The JSON a hetflow command prints, run without showing it (the demo shows
        the same command's table)."""
        argv = _hetflow_argv(args)
        done = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise DemoError(f"{what}: `hetflow {shlex.join(args)}` exited {done.returncode}: {done.stderr.strip()}")
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise DemoError(f"{what}: `hetflow {shlex.join(args)}` printed no JSON") from exc

    def podman_cmd(self, *args: str, what: str, echo: bool = True, timeout: float = 300) -> str:
        return self.sh(["podman", *args], [self.podman, *args], what=what, echo=echo, timeout=timeout)

    # the parts ------------------------------------------------------------------------

    def build(self) -> None:
        self.section("1. Three builds of one program (examples/hwmatch/whichbuild.c)")
        try:
            build_hwmatch_images(self.examples, log=lambda m: print(f"  {m}", flush=True))
        except HetflowError as exc:
            raise DemoError(f"building the whichbuild images: {exc}") from exc
        for b in HWMATCH_BUILDS:
            needs = b.features or "any x86-64 CPU"
            print(f"  {b.image:48} -march={b.march:10} BUILD={b.name:9} index entry needs: {needs}")

    def registry(self) -> Service:
        self.section("2. A registry on loopback, the builds pushed, one index over them")
        root = self.workdir / "registry"
        shutil.rmtree(root, ignore_errors=True)  # a fresh registry every time
        registry = start_registry(root, self.registry_port)
        self.services.append(registry)
        self.say(f"docker-registry serving {registry.url} (storage {root / 'data'})")
        for b in HWMATCH_BUILDS:
            self.podman_cmd(
                "push", "--quiet", "--tls-verify=false", b.image, f"{registry.host}/{REPO}:{b.tag}",
                what=f"pushing the {b.tag} build",
            )  # fmt: skip
        index = f"{registry.host}/{REPO}:latest"
        self.hetflow(
            "images", "build-index", index, *[b.index_entry for b in HWMATCH_BUILDS], what="building the index"
        )
        return registry

    def resolve(self, index: str) -> None:
        """Inspect the index and resolve it per machine; sets ``digests`` ({build tag:
        digest}) and ``here`` (this machine's build digest)."""
        self.section("3. What the index holds, and the build each machine gets")
        inspected = self._json("images", "inspect", index, "--json", what="inspecting the index")
        self.digests = digests = {
            e["annotations"].get("org.hetflow.build.tag", str(i)): e["digest"]
            for i, e in enumerate(inspected["entries"])
        }
        self.hetflow("images", "inspect", index, what="inspecting the index")
        chosen: dict[str, str] = {}
        for machine, build in MACHINES.items():
            self.say("")
            self.hetflow("images", "resolve", index, "--node", machine, what=f"resolving for {machine}")
            result = self._json(
                "images", "resolve", index, "--node", machine, "--json", what=f"resolving for {machine}"
            )
            got = _build_of(result["chosen"], digests)
            chosen[machine] = result["chosen"]
            if BUILD_NAMES.get(got) != build:
                raise DemoError(f"the resolver gave {machine} the {got} build, not {build}")
        self.say("")
        here = self._json("images", "resolve", index, "--json", what="resolving for this machine")
        self.hetflow("images", "resolve", index, what="resolving for this machine")
        self.say("")
        self.say("Builds chosen (one image reference, different digests):")
        for machine, digest in {**chosen, f"this machine ({here['node']})": here["chosen"]}.items():
            self.say(f"  {machine:28} -> {_build_of(digest, digests):8} {digest}")
        if len(set(chosen.values())) != len(MACHINES):
            raise DemoError("the resolver did not give the three machines three different builds")
        if here["chosen"] is None:
            raise DemoError(f"no build of {index} fits this machine: " + "; ".join(here["explanation"]))
        self.here, self.here_node = str(here["chosen"]), str(here["node"])

    def plain_pull(self, index: str) -> None:
        self.section("4. Without hetflow: podman pulls the first build, whatever the CPU")
        self.podman_cmd("pull", "--quiet", "--tls-verify=false", index, what="pulling the index directly")
        self.pulled.append(index)
        out = self.podman_cmd("run", "--rm", "--network=none", index, "whichbuild", "--build", what="running it")
        self.say(
            f"-> a plain pull gave this machine the {out.strip()!r} build (the index's first entry); "
            f"hetflow resolves it to the {BUILD_NAMES.get(_build_of(self.here, self.digests), '?')!r} build"
        )

    def proxy(self, registry: Service) -> None:
        self.section("5. The registry proxy: each machine type logs in and pulls its own build")
        state = self.workdir / "proxy"
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        port = self.proxy_port or free_port()
        if self.proxy_port and port_taken(port):
            raise DemoError(f"127.0.0.1:{port} is taken; pick another --proxy-port, or 0 for a free one")
        listen = f"127.0.0.1:{port}"
        args = ["registry", "serve", "--upstream", registry.url, "--listen", listen, "--state-dir", str(state)]
        self.say("$ " + shlex.join(["hetflow", *args]) + " &")
        log = state / "proxy.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                _hetflow_argv(args), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env
            )
        proxy = Service("proxy", listen, process, log)
        self.services.append(proxy)
        if not wait_ready(proxy, (200, 401), 30):
            raise DemoError(f"the registry proxy did not start on {listen}; its log ends:\n{proxy.log_tail()}")
        self.say(proxy.log_tail(3))
        image = f"{proxy.host}/{REPO}:latest"
        got: dict[str, str] = {}
        for machine, build in MACHINES.items():
            self.say("")
            authfile = state / f"auth-{machine}.json"
            self.hetflow(
                "registry", "login", proxy.url, "--node", machine, "--authfile", str(authfile),
                what=f"logging in as {machine}",
            )  # fmt: skip
            try:
                self.podman_cmd(
                    "pull", "--quiet", "--tls-verify=false", "--authfile", str(authfile), image,
                    what=f"pulling through the proxy as {machine}",
                )  # fmt: skip
            except DemoError as exc:
                raise DemoError(f"{exc}\nthe proxy's log ({proxy.log}) ends:\n{proxy.log_tail(8)}") from exc
            self.pulled.append(image)
            out = self.podman_cmd("run", "--rm", "--network=none", image, what=f"running what {machine} got")
            got[machine] = _field(out, "BUILD")
            if got[machine] != build:
                raise DemoError(f"through the proxy, {machine} got the {got[machine]!r} build, not {build!r}")
        self.say("")
        self.say("Pulled through the proxy, same reference " + image + ":")
        for machine, build in got.items():
            self.say(f"  {machine:12} ran BUILD={build}")
        if len(set(got.values())) != len(MACHINES):
            raise DemoError("the proxy did not hand the machine types different builds")

    def workflow(self, registry: Service) -> None:
        self.section("6. A workflow that names the index, run straight from the registry")
        template = self.examples / TEMPLATE
        try:
            text = render_workflow(template.read_text(), registry.host)
        except OSError as exc:
            raise DemoError(f"cannot read the workflow template {template}: {exc.strerror}") from exc
        target = self.workdir / "workflow.yaml"
        target.write_text(text)
        self.say(f"{template} with ${{REGISTRY}} = {registry.host} -> {target}")
        # --no-cache: the point is which build runs here; a second `make demo` would otherwise
        # take both steps from the first one's cache and run no image at all
        out = self.hetflow("run", "--no-cache", str(target), what="running the workflow", timeout=600)
        match = re.search(r"^run ([0-9a-f]{8}) ", out, re.MULTILINE)
        if match is None:
            raise DemoError("`hetflow run` printed no run id")
        run_id = match.group(1)
        self.say("")
        self.say(f"$ hetflow show {run_id} --json   (per attempt, the image that ran)")
        shown = self._json("show", run_id, "--json", what="showing the run")
        images = set()
        for step in shown["steps"]:
            for attempt in step.get("attempt_history", []):
                image = str(attempt["image"])
                images.add(image)
                build = _build_of(image.partition("@")[2], self.digests)
                self.say(f"  {step['step']:6} attempt {attempt['attempt']}: {image}  ({build} build)")
        self.say("")
        self.hetflow("logs", run_id, what="printing the steps' output")
        if shown["state"] != "succeeded":
            raise DemoError(f"run {run_id} ended {shown['state']}: {shown.get('message')}")
        expected = f"{registry.host}/{REPO}@{self.here}"
        if images != {expected}:
            raise DemoError(f"the run's steps ran {sorted(images)}, not this machine's build {expected}")
        self.say(f"-> both steps ran {expected}, the build hetflow resolved for {self.here_node}")

    def cleanup(self) -> None:
        # Untag what the demo pulled by tag (the images are the local builds, which keep
        # their names).  Never `podman rmi`: by a digest reference it removes the image
        # with all its names.  What `hetflow run` pulled by digest stays, as it does
        # after any run.
        for name in dict.fromkeys(self.pulled):
            subprocess.run(
                [self.podman, "untag", name, name],
                env=self.env,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        for service in reversed(self.services):
            service.stop()
        self.services.clear()


def _build_of(digest: str | None, digests: Mapping[str, str]) -> str:
    for tag, d in digests.items():
        if d == digest:
            return tag
    return "?"


def _field(output: str, key: str) -> str:
    for line in output.splitlines():
        if line.startswith(f"{key}="):
            return line.partition("=")[2].strip()
    return ""
