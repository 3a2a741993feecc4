"""A minimal Kubernetes control plane for the real-node test (demo/kube_kubelet.py): a throwaway
CA and certificates, etcd, kube-apiserver (Node,RBAC), kube-controller-manager and
kube-scheduler from tools/kube/build, each on 127.0.0.1 and a free port.  It has no kwok and
no test objects: demo/kube_cluster.py is the full test cluster; this one only has to let a
kubelet join and run pods.

    BASE/pki/  ca, apiserver, admin (system:masters), node-NAME (system:node:NAME), sa key
    BASE/admin.kubeconfig  BASE/log/NAME.log
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hetflow.errors import EngineError

__all__ = ["ControlPlane", "admin_tls", "control_plane", "free_port", "kube_bin", "node_kubeconfig"]

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "tools" / "kube" / "build"


def kube_bin(*, kubelet: bool = False) -> Path:
    """tools/kube/build's bin folder, built first where a binary is missing (the kubelet is
    built only when asked: KUBE_KUBELET=1)."""
    out = subprocess.run([str(BUILD), "--print-dir"], capture_output=True, text=True, check=False)
    folder = Path(out.stdout.strip())
    programs = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"] + ["kubelet"] * kubelet
    if out.returncode != 0 or not folder.name:
        raise EngineError(f"{BUILD} --print-dir failed: {out.stderr.strip()}")
    if not all((folder / p).exists() for p in programs) or (kubelet and not any(folder.glob(".built-kubelet-*"))):
        env = {**os.environ, "KUBE_KUBELET": "1" if kubelet else "0"}
        if subprocess.run([str(BUILD)], env=env, check=False).returncode != 0:
            raise EngineError(f"{BUILD} failed; its log: {folder.parent / 'build.log'}")
    return folder


def admin_tls(pki: Path) -> ssl.SSLContext:
    """TLS for the admin: trusts the test CA, presents admin.crt."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    return key


def _cert(
    pki: Path, name: str, cn: str, orgs: Sequence[str] = (), sans: Sequence[str] = (), *, ca: bool = False
) -> None:
    """PKI/NAME.crt and .key, signed by PKI/ca (or self-signed when ``ca``); a day's validity."""
    key = _key(pki / f"{name}.key")
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )
    if ca:
        issuer, signer = subject, key
    else:
        issuer = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()).subject
        signer = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)  # type: ignore[assignment]
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        alt = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in sans]
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    (pki / f"{name}.crt").write_bytes(b.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


def _kubeconfig(path: Path, server: str, pki: Path, user: str) -> Path:
    """A kubeconfig (JSON is YAML) for the client certificate PKI/USER.crt."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(pki / f"{user}.crt"), "client-key": str(pki / f"{user}.key")},
            }
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(cfg, indent=1))
    return path


def node_kubeconfig(base: Path, server: str, name: str) -> Path:
    """A kubeconfig for the node identity system:node:NAME (group system:nodes), which the Node
    authorizer and NodeRestriction admission plugin limit to that node's own objects."""
    pki = base / "pki"
    _cert(pki, f"node-{name}", f"system:node:{name}", ["system:nodes"])
    return _kubeconfig(base / f"node-{name}.kubeconfig", server, pki, f"node-{name}")


@dataclass
class ControlPlane:
    """A running control plane under ``base``; ``server`` its https URL."""

    base: Path
    server: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.base / "admin.kubeconfig"

    def stop(self) -> None:
        """End the processes it started: controllers first, etcd last."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _args(base: Path, binp: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    pki, kc = base / "pki", str(base / "admin.kubeconfig")
    etcd = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['peer']}"
    return {
        "etcd": [str(binp / "etcd"), f"--data-dir={base / 'etcd'}", f"--listen-client-urls={etcd}",
                 f"--advertise-client-urls={etcd}", f"--listen-peer-urls={peer}",
                 f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=default={peer}"],
        "kube-apiserver": [
            str(binp / "kube-apiserver"), f"--etcd-servers={etcd}", f"--secure-port={ports['api']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--service-cluster-ip-range=10.0.0.0/24",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}",
        ],
        "kube-controller-manager": [
            str(binp / "kube-controller-manager"), f"--kubeconfig={kc}", f"--secure-port={ports['cm']}",
            "--bind-address=127.0.0.1", "--leader-elect=false", f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
        ],
        "kube-scheduler": [
            str(binp / "kube-scheduler"), f"--kubeconfig={kc}", f"--secure-port={ports['sched']}",
            "--bind-address=127.0.0.1", "--leader-elect=false", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
        ],
    }  # fmt: skip


def control_plane(base: Path, *, timeout: float = 120) -> ControlPlane:
    """Start etcd, the API server, the controller manager and the scheduler under ``base``;
    returns when the API server is ready and namespace default has its service account."""
    base = Path(base).resolve()
    binp = kube_bin()
    for d in ("pki", "log", "etcd"):
        (base / d).mkdir(parents=True, exist_ok=True)
    pki = base / "pki"
    _cert(pki, "ca", "hetflow-test-ca", ca=True)
    sans = ["127.0.0.1", "10.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    _cert(pki, "apiserver", "kube-apiserver", sans=sans)
    _cert(pki, "admin", "admin", ["system:masters"])
    sa = _key(pki / "sa.key").public_key()
    (pki / "sa.pub").write_bytes(
        sa.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    ports = {p: free_port() for p in ("etcd", "peer", "api", "cm", "sched")}
    plane = ControlPlane(base, f"https://127.0.0.1:{ports['api']}")
    _kubeconfig(plane.kubeconfig, plane.server, pki, "admin")
    try:
        for name, args in _args(base, binp, ports).items():
            with (base / "log" / f"{name}.log").open("ab") as log:
                plane.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=base)
        http = httpx.Client(base_url=plane.server, verify=admin_tls(pki))
        deadline = time.monotonic() + timeout
        while not _ready(http, plane):
            if time.monotonic() > deadline:
                raise EngineError(f"the test control plane was not ready after {timeout:.0f} s; logs: {base / 'log'}")
            time.sleep(0.3)
    except BaseException:
        plane.stop()
        raise
    return plane


def _ready(http: httpx.Client, plane: ControlPlane) -> bool:
    for name, proc in plane.procs.items():
        if proc.poll() is not None:
            log = (plane.base / "log" / f"{name}.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise EngineError(f"{name} exited ({proc.returncode}):\n  " + "\n  ".join(log))
    try:
        return http.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200
    except httpx.HTTPError:
        return False
