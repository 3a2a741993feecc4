"""A real Kubernetes node on this machine: containerd (Debian's package) and a kubelet built by
tools/kube/build (``KUBE_KUBELET=1``), so pods of hetflow's images run as real containers
through a test control plane.  ``start_node`` joins a cluster given a kubeconfig (the
cluster's admin's, or a node identity system:node:NAME); demo.kube.cluster.start_cluster starts
the control plane, with ``nodes=()`` for one without kwok nodes (kwok leaves this node alone
anyway: it manages only nodes annotated kwok.x-k8s.io/node=fake).  Measured here: the node Ready 1.1 s after
start_node (busybox imported), a pod created to Succeeded about 2 s.

What this machine needs, and why each piece is set the way it is:

- containerd runs with its own config, root, state and socket under BASE (it never touches a
  system containerd): runc with cgroupfs (the kernel's cgroup layout is hybrid v1; no systemd);
  overlayfs snapshots; CNI from containernetworking-plugins: a bridge of its own (``hfkN`` with
  10.213.N.1/24, the first N free) with host-local addresses, no masquerade.  The bridge's
  address is the node's IP: the kubelet refuses a loopback --node-ip ("nodeIP can't be loopback
  address"), and the API server reaches the kubelet at the node's InternalIP for logs and exec.
- The sandbox (pause) image is Kubernetes' own build/pause/linux/pause.c from the module cache,
  compiled statically with gcc and written as an OCI archive here; images come from podman
  (``podman save`` | ``ctr -n k8s.io images import``): there is no registry, so pods must use
  ``imagePullPolicy: Never`` or ``IfNotPresent``.
- Both run in one private mount namespace (``unshare --mount``): the kubelet writes kernel
  tunables it wants (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1), and
  here those writes land on files bound over /proc/sys inside the namespace, not on the shared
  host; every mount the kubelet and containerd make (volumes, rootfs, netns) lives in that
  namespace and goes with it when ``stop`` ends its processes.
- kubelet: ``cgroupDriver: cgroupfs``, ``cgroupsPerQOS: false`` and no node-allocatable
  enforcement (no kubepods hierarchy on a host cgroup tree it does not own), ``failSwapOn:
  false``, ``failCgroupV1: false`` (the host is cgroup v1), ``oomScoreAdj: 0`` (root lacks
  CAP_SYS_RESOURCE to lower it), image GC off (imported images cannot be pulled again), the
  kernel memcg notifier off; it serves on the node's IP and a free port (healthz on 127.0.0.1),
  trusts client certificates of the cluster's CA (the API server's, for logs and exec) and
  allows them everything; no anonymous access.
- Mounts made on the host after start_node are not seen inside the node's namespace: create a
  hostPath's own folder before, or below a folder that existed (plain folders are fine).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import io
import json
import os
import shutil
import signal
import ssl
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from demo.kube.processes import free_port, kube_bin
from hetflow.config import engine_env
from hetflow.errors import EngineError

__all__ = ["PAUSE_IMAGE", "RealNode", "start_node"]

PAUSE_IMAGE = "localhost/hetflow-test/pause:3.10"
TINY_IMAGE = "localhost/hetflow-test/busybox:latest"
# What the kubelet's container manager writes (pkg/kubelet/cm: setupKernelTunables).
TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")  # fmt: skip
NEEDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "unshare": "util-linux", "gcc": "gcc"}
CNI_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class RealNode:
    """A running node: ``name`` in the cluster, at ``ip`` (its bridge's gateway address: the
    kubelet refuses a loopback node IP, and the API server reaches it there for logs)."""

    base: Path
    name: str
    ip: str
    bridge: str
    containerd_pid: int
    kubelet_pid: int

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    def stop(self, timeout: float = 20) -> None:
        """End the kubelet; kill and delete every container through containerd (so runc
        removes their cgroups); end containerd and every process left in the node's mount
        namespace (shims), so the namespace and every mount in it go; remove the bridge."""
        _end([self.kubelet_pid], timeout)
        if _alive(self.containerd_pid):
            ctr = ["ctr", "-a", str(self.socket), "-n", "k8s.io", "tasks"]
            tasks = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, check=False).stdout.split()
            for task in tasks:
                subprocess.run([*ctr, "kill", "-a", "-s", "SIGKILL", task], capture_output=True, check=False)
            for task in tasks:
                subprocess.run([*ctr, "delete", "-f", task], capture_output=True, check=False, timeout=timeout)
        inside = _pids_in_namespace(self.containerd_pid)
        _end([self.containerd_pid], timeout)
        _end(inside, timeout)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)


def _end(pids: Sequence[int], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        _signal(pid, signal.SIGKILL)
    while [p for p in pids if _alive(p)] and time.monotonic() < deadline + 5:
        time.sleep(0.1)


def _signal(pid: int, sig: signal.Signals) -> None:
    if pid <= 0:  # never a process group or every process (kill(2) on 0 or -1)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):  # a child of ours: reap it
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _pids_in_namespace(pid: int) -> list[int]:
    """Every process in ``pid``'s mount namespace: all started inside the node (never the
    host's own namespace, should ``pid`` be gone and its number reused)."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return []
    if ns == os.readlink("/proc/self/ns/mnt"):
        return []
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "mnt") == ns:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


# --- the pause image and the images of tests -----------------------------------------------


def _pause_archive(base: Path, binp: Path) -> Path:
    """Kubernetes' pause.c (from the module cache of tools/kube/build) built statically, as an
    OCI archive named PAUSE_IMAGE (what containerd's sandbox_image says)."""
    sources = sorted((binp.parent / "gomod").glob("k8s.io/kubernetes@*/build/pause/linux/pause.c"))
    if not sources:
        raise EngineError(f"no build/pause/linux/pause.c of k8s.io/kubernetes under {binp.parent / 'gomod'}; "
                          "run tools/kube/build")  # fmt: skip
    binary = base / "pause"
    gcc = ["gcc", "-Os", "-static", "-DVERSION=v3.10-hetflow", "-o", str(binary), str(sources[-1])]
    out = subprocess.run(gcc, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise EngineError(f"building the pause image failed ({' '.join(gcc)}): {out.stderr.strip()[-400:]}; "
                          "install gcc and libc6-dev")  # fmt: skip
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = binary.stat().st_size, 0o755
        with binary.open("rb") as f:
            t.addfile(info, f)
    diff_id = "sha256:" + hashlib.sha256(layer.getvalue()).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]}}  # fmt: skip
    archive = base / "pause.tar"
    with tarfile.open(archive, "w") as out_tar:
        add = _adder(out_tar)
        oci = "application/vnd.oci.image"
        manifest = {"schemaVersion": 2, "mediaType": f"{oci}.manifest.v1+json",
                    "config": {"mediaType": f"{oci}.config.v1+json", **add(json.dumps(config))},
                    "layers": [{"mediaType": f"{oci}.layer.v1.tar", **add(layer.getvalue())}]}  # fmt: skip
        ref = {"io.containerd.image.name": PAUSE_IMAGE, "org.opencontainers.image.ref.name": PAUSE_IMAGE.split(":")[-1]}
        entry = {"mediaType": manifest["mediaType"], **add(json.dumps(manifest)), "annotations": ref}
        add(json.dumps({"imageLayoutVersion": "1.0.0"}), "oci-layout")
        add(json.dumps({"schemaVersion": 2, "manifests": [entry]}), "index.json")
    return archive


def _adder(out: tarfile.TarFile) -> Callable[..., dict[str, Any]]:
    """Adds a blob (blobs/sha256/DIGEST, or ``name``) to an OCI layout archive; returns its
    descriptor's digest and size."""

    def add(data: str | bytes, name: str = "") -> dict[str, Any]:
        raw = data.encode() if isinstance(data, str) else data
        digest = hashlib.sha256(raw).hexdigest()
        info = tarfile.TarInfo(name or f"blobs/sha256/{digest}")
        info.size = len(raw)
        out.addfile(info, io.BytesIO(raw))
        return {"digest": f"sha256:{digest}", "size": len(raw)}

    return add


def _import(socket: Path, images: Sequence[str], pause: Path) -> None:
    """The pause archive and each of ``images`` from podman's store into containerd's k8s.io
    namespace (where the CRI looks)."""
    ctr = ["ctr", "-a", str(socket), "-n", "k8s.io", "images", "import"]
    with tempfile.TemporaryDirectory(dir=socket.parent) as tmp:
        archives = [pause]
        for n, image in enumerate(images):
            archives.append(Path(tmp) / f"{n}.tar")
            save = ["podman", "save", "-o", str(archives[-1]), image]
            out = subprocess.run(save, capture_output=True, text=True, env=engine_env(), check=False)
            if out.returncode != 0:
                raise EngineError(f"{' '.join(save)} failed: {out.stderr.strip()[-300:]} (make images builds it)")
        for archive in archives:
            out = subprocess.run([*ctr, str(archive)], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise EngineError(f"ctr images import {archive} failed: {out.stderr.strip()[-300:]}")


# --- containerd, the network, the kubelet --------------------------------------------------


def _containerd_config(base: Path, conf_dir: Path) -> Path:
    state = base / "containerd"
    text = f"""version = 2
root = "{state / "root"}"
state = "{state / "state"}"
[grpc]
  address = "{base / "containerd.sock"}"
[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_DIR}"
    conf_dir = "{conf_dir}"
"""
    (base / "containerd.toml").write_text(text)
    return base / "containerd.toml"


def _bridge(base: Path) -> tuple[str, int]:
    """A bridge ``hfkN`` with 10.213.N.1/24 for the first N no interface uses yet: the node's
    IP and its pods' gateway (the CNI bridge plugin adopts it)."""
    used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    for n in range(1, 255):
        name = f"hfk{n}"
        if f" 10.213.{n}." in used or f" {name}:" in links or f" {name}@" in links:
            continue
        add = subprocess.run(["ip", "link", "add", name, "type", "bridge"], capture_output=True, text=True, check=False)
        if add.returncode != 0:
            continue  # taken meanwhile by another node
        for cmd in (["ip", "addr", "add", f"10.213.{n}.1/24", "dev", name], ["ip", "link", "set", name, "up"]):
            subprocess.run(cmd, capture_output=True, check=True)
        return name, n
    raise EngineError("no free bridge hfk1..hfk254 / subnet 10.213.N.0/24 for a test node")


def _cni_conf(base: Path, bridge: str, n: int) -> Path:
    ipam = {"type": "host-local", "ranges": [[{"subnet": f"10.213.{n}.0/24", "gateway": f"10.213.{n}.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(base / "ipam")}  # fmt: skip
    plugin = {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True, "ipam": ipam}
    conf = base / "cni"
    conf.mkdir(exist_ok=True)
    (conf / "10-hetflow.conflist").write_text(json.dumps({"cniVersion": "0.4.0", "name": bridge, "plugins": [plugin]}))
    return conf


def _kubelet_config(base: Path, ip: str, ca: Path) -> Path:
    """The KubeletConfiguration (see the module's docstring for why each setting)."""
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": ip,
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "containerRuntimeEndpoint": f"unix://{base / 'containerd.sock'}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "oomScoreAdj": 0,
        "kernelMemcgNotification": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "registerNode": True,
    }
    (base / "kubelet.json").write_text(json.dumps(cfg, indent=1))
    return base / "kubelet.json"


def _tls(kubeconfig: Path, base: Path) -> tuple[str, ssl.SSLContext, Path]:
    """The server, a TLS context and the CA file of ``kubeconfig``'s current context (files or
    inline ``*-data``)."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    ctx_name = cfg["current-context"]
    context = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == context["user"])

    def file(section: dict[str, str], key: str) -> str:
        if f"{key}-data" in section:
            path = base / f"{key}.pem"
            path.write_bytes(base64.b64decode(section[f"{key}-data"]))
            return str(path)
        return str((kubeconfig.parent / section[key]).resolve())

    ca = file(cluster, "certificate-authority")
    tls = ssl.create_default_context(cafile=ca)
    tls.load_cert_chain(file(user, "client-certificate"), file(user, "client-key"))
    return cluster["server"], tls, Path(ca)


def _check_tools() -> None:
    missing = sorted({pkg for tool, pkg in NEEDS.items() if shutil.which(tool) is None})
    if not (CNI_DIR / "bridge").exists() or not (CNI_DIR / "host-local").exists():
        missing.append("containernetworking-plugins")
    if missing:
        raise EngineError(
            f"a real test node needs Debian's {', '.join(missing)}: apt-get install -y {' '.join(missing)}"
        )


def _spawn(base: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    with (base / f"{name}.log").open("ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=base,
                                start_new_session=True)  # fmt: skip


def _namespace_script(base: Path, config: Path) -> str:
    """What runs in the new mount namespace before containerd: each tunable the kubelet writes
    gets a private file (holding the host's value) bound over it."""
    (base / "sysctl").mkdir(exist_ok=True)
    binds = [f"f={base / 'sysctl' / t.replace('/', '.')}; cat /proc/sys/{t} > $f; mount --bind $f /proc/sys/{t}"
             for t in TUNABLES]  # fmt: skip
    return "set -e\n" + "\n".join(binds) + f"\nexec containerd --config {config}\n"


Procs = dict[str, subprocess.Popen[bytes]]


def _wait(what: str, ready: Callable[[], bool], procs: Procs, base: Path, t: float) -> None:
    deadline = time.monotonic() + t
    while not ready():
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = (base / f"{name}.log").read_text(errors="replace").strip().splitlines()[-6:]
                raise EngineError(f"{name} exited ({proc.returncode}) before {what}:\n  " + "\n  ".join(tail))
        if time.monotonic() > deadline:
            raise EngineError(f"{what}: not after {t:.0f} s; logs in {base}")
        time.sleep(0.2)


def start_node(
    base: Path, kubeconfig: Path, server: str, name: str, *, images: Sequence[str] = (TINY_IMAGE,), timeout: float = 120
) -> RealNode:
    """Start containerd and a kubelet that registers node ``name`` with the API server
    ``server``, as the identity in ``kubeconfig`` (system:node:NAME or an admin); import the
    pause image and ``images`` (from podman); return once the node is Ready."""
    _check_tools()
    binp = kube_bin(kubelet=True)
    base = Path(base).resolve()
    base.mkdir(parents=True, exist_ok=True)
    api_server, tls, ca = _tls(Path(kubeconfig), base)
    bridge, n = _bridge(base)
    ip = f"10.213.{n}.1"
    procs: Procs = {}
    try:
        config = _containerd_config(base, _cni_conf(base, bridge, n))
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _namespace_script(base, config)]
        procs["containerd"] = _spawn(base, "containerd", unshare)
        ctr_ok = ["ctr", "-a", str(base / "containerd.sock"), "version"]
        _wait(
            "containerd answers", lambda: subprocess.run(ctr_ok, capture_output=True).returncode == 0, procs, base, 30
        )
        _import(base / "containerd.sock", images, _pause_archive(base, binp))
        kubelet = [
            "nsenter", f"--mount=/proc/{procs['containerd'].pid}/ns/mnt", str(binp / "kubelet"),
            f"--config={_kubelet_config(base, ip, ca)}", f"--kubeconfig={Path(kubeconfig).resolve()}",
            f"--root-dir={base / 'kubelet'}", f"--cert-dir={base / 'kubelet-pki'}", f"--hostname-override={name}",
            f"--node-ip={ip}", "--v=2",
        ]  # fmt: skip
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        procs["kubelet"] = _spawn(base, "kubelet", kubelet)
        http = httpx.Client(base_url=server or api_server, verify=tls, timeout=10)
        _wait(f"node {name} Ready", lambda: _ready(http, name, since), procs, base, timeout)
    except BaseException:
        RealNode(base, name, ip, bridge, procs["containerd"].pid if "containerd" in procs else -1,
                 procs["kubelet"].pid if "kubelet" in procs else -1).stop()  # fmt: skip
        raise
    return RealNode(base, name, ip, bridge, procs["containerd"].pid, procs["kubelet"].pid)


def _ready(http: httpx.Client, name: str, since: str) -> bool:
    """The node is Ready by a heartbeat of this kubelet (not one of a node of that name before)."""
    try:
        r = http.get(f"/api/v1/nodes/{name}")
    except httpx.HTTPError:
        return False
    conditions = r.json().get("status", {}).get("conditions", []) if r.status_code == 200 else []
    return any(
        c["type"] == "Ready" and c["status"] == "True" and c.get("lastHeartbeatTime", "") >= since for c in conditions
    )
