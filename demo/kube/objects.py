"""What the local Kubernetes test cluster (demo/kube/cluster.py) writes before it starts:
its PKI and kubeconfigs, kwok's configuration (demo/kube/kwok.py: the pod stages of hetflow's
test convention and the logs every kwok pod serves), and the API objects of a simulated node."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from demo.kube.kwok import cri_log, kwok_config

Obj = dict[str, Any]
DRA_DRIVER = "gpu.nvidia.com"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok manages the nodes with this annotation = "fake"
RESTRICTED_USER = "hf-restricted"  # may only get and list pods in namespace "default"
# (productName, architecture, cudaComputeCapability, driverVersion, memory): the attributes
# NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes for a whole GPU
DraGpu = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class KwokNode:
    """A simulated node: kwok keeps it Ready and plays its pods' lifecycle.  ``extended``:
    device-plugin resources ({"nvidia.com/gpu": 4}); ``dra_gpus``: GPUs published in a
    ResourceSlice of driver gpu.nvidia.com (no kubelet plugin behind them)."""

    name: str
    cpus: int = 8
    memory: str = "32Gi"
    labels: Mapping[str, str] = field(default_factory=dict)
    extended: Mapping[str, int] = field(default_factory=dict)
    dra_gpus: tuple[DraGpu, ...] = ()


def gfd_labels(product: str, memory_mib: int, cc: tuple[int, int], count: int) -> dict[str, str]:
    """GPU Feature Discovery's labels for a node of ``count`` GPUs ``product`` (GFD README,
    "Generated Labels": blanks in the product name become dashes)."""
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product.replace(" ", "-"),
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.compute.major": str(cc[0]),
        "nvidia.com/gpu.compute.minor": str(cc[1]),
        "nvidia.com/gpu.count": str(count),
    }


def node_object(node: KwokNode) -> Obj:
    """The Node as kwok's docs create one: status capacity given at creation, which kwok's
    node-initialize stage keeps while it adds conditions, addresses and the kubelet port."""
    resources = {"cpu": str(node.cpus), "memory": node.memory, "pods": "110"}
    resources.update({k: str(v) for k, v in node.extended.items()})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **node.labels,
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def resource_slice(node: KwokNode, node_uid: str) -> Obj:
    """The node's GPUs as NVIDIA's DRA driver publishes them (resource.k8s.io/v1), owned by
    the Node so the garbage collector removes it with the node, as a kubelet's are."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": i},
                "uuid": {"string": f"GPU-{node.name}-{i}"},
                "productName": {"string": product},
                "architecture": {"string": arch},
                "cudaComputeCapability": {"version": _semver(cc)},
                "driverVersion": {"version": _semver(driver)},
            },
            "capacity": {"memory": {"value": memory}},
        }
        for i, (product, arch, cc, driver, memory) in enumerate(node.dra_gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node.name}-{DRA_DRIVER}",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid}],
        },
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _semver(v: str) -> str:
    """A DRA version attribute is semver: "9.0" -> "9.0.0" (the driver pads it the same way)."""
    parts = v.split(".")
    return ".".join([*parts, "0", "0"][:3])


DEVICE_CLASS: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRA_DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
}

RESTRICTED_RBAC: tuple[Obj, ...] = (
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "hf-pod-reader", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "hf-pod-reader", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hf-pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RESTRICTED_USER}],
    },
)


# --- PKI -----------------------------------------------------------------------------------


def _cert(
    subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0] if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
    )


def _pem(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_pki(pki: Path) -> None:
    """A CA; the API server's serving certificate (127.0.0.1, localhost, the kubernetes
    Service's names); client certificates for the admin (group system:masters, which every
    component uses) and the restricted user; the service-account signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hetflow-test-ca")])
    ca = (
        _cert(ca_name, ca_key, None)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(_pem(ca))
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.96.0.1")]
    leaves = {
        "server": [x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")],
        "admin": [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-admin"),
        ],
        "restricted": [x509.NameAttribute(NameOID.COMMON_NAME, RESTRICTED_USER)],
    }
    for name, attrs in leaves.items():
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if name == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = _cert(x509.Name(attrs), key, (ca_name, ca_key))
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if name == "server":
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        (pki / f"{name}.crt").write_bytes(_pem(builder.sign(ca_key, hashes.SHA256())))
        (pki / f"{name}.key").write_bytes(_pem(key))
    sa = ec.generate_private_key(ec.SECP256R1())
    (pki / "sa.key").write_bytes(_pem(sa))
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def kubeconfig(server: str, pki: Path, user: str) -> str:
    """A kubeconfig for ``server`` with ``user``'s client certificate (admin or restricted),
    every certificate inline so the file stands alone."""

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "hetflow-test", "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")}}
            ],
            "users": [
                {
                    "name": user,
                    "user": {"client-certificate-data": b64(f"{user}.crt"), "client-key-data": b64(f"{user}.key")},
                }
            ],
            "contexts": [{"name": f"hetflow-test-{user}", "context": {"cluster": "hetflow-test", "user": user}}],
            "current-context": f"hetflow-test-{user}",
        },
        sort_keys=False,
    )


# --- the components ------------------------------------------------------------------------


def component_args(base: Path, binp: Path, ports: Mapping[str, int]) -> dict[str, list[str]]:
    """Each component's command line (binaries in ``binp``, ports by component)."""
    pki, kc = base / "pki", str(base / "kubeconfig")
    etcd_url, peer_url = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd-peer']}"
    # no --authentication/authorization-kubeconfig: /healthz is always allowed, and nothing else is asked of them
    delegated = ["--bind-address=127.0.0.1"]
    # fmt: off
    return {
        "etcd": [
            str(binp / "etcd"), "--name=hf", f"--data-dir={base / 'etcd'}", "--log-level=warn",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=hf={peer_url}", "--unsafe-no-fsync",  # a throwaway test store
        ],
        "kube-apiserver": [
            str(binp / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
            "--endpoint-reconciler-type=none",  # no kubernetes Service endpoint at a loopback address
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            # pod logs: the apiserver asks the node's "kubelet" (kwok's server) at its InternalIP
            f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ],
        "kube-controller-manager": [
            str(binp / "kube-controller-manager"), f"--kubeconfig={kc}", *delegated,
            f"--secure-port={ports['controller-manager']}", "--leader-elect=false",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        ],
        "kube-scheduler": [
            str(binp / "kube-scheduler"), f"--config={base / 'scheduler.yaml'}", *delegated,
            f"--secure-port={ports['scheduler']}",
        ],
        "kwok": [
            str(binp / "kwok"), f"--kubeconfig={kc}", f"--config={base / 'kwok' / 'kwok.yaml'}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", f"--node-port={ports['kwok']}", f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            "--cidr=10.244.0.1/16", "--node-lease-duration-seconds=40",
        ],
    }
    # fmt: on


def write_files(base: Path, server: str, scheduler_qps: int = 0) -> None:
    """Everything the components read: PKI, kubeconfigs, kwok's configuration, the scheduler's
    (its client limited to 50 requests/s, burst 100, by default; ``scheduler_qps``: another limit)."""
    write_pki(base / "pki")
    (base / "kubeconfig").write_text(kubeconfig(server, base / "pki", "admin"))
    (base / "kubeconfig-restricted").write_text(kubeconfig(server, base / "pki", "restricted"))
    (base / "kwok" / "pod.log").write_text(cri_log(["kwok: a simulated container (it ran nothing)"]))
    (base / "kwok" / "kwok.yaml").write_text(kwok_config(base / "kwok" / "pod.log"))
    qps = f"  qps: {scheduler_qps}\n  burst: {2 * scheduler_qps}\n" if scheduler_qps else ""
    (base / "scheduler.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {base / 'kubeconfig'}\n{qps}leaderElection:\n  leaderElect: false\n"
    )
