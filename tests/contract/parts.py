"""The parts of the backend contract, by name, and the backends that run them: every backend's
test class subclasses every part (tests/unit/test_contract_parts.py fails a missing pairing),
skipping only what it names in ``LACKS`` (``backend_contract.ContractPart``)."""

from __future__ import annotations

from tests.contract.backend_contract import BackendContract, ContractPart, OrderingContract
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract

PARTS: dict[str, type[ContractPart]] = {
    part.PART: part for part in (BackendContract, OrderingContract, GangContract, NodeFailureContract)
}
# backend (its Capabilities.name) -> (its test module, its contract class)
BACKENDS: dict[str, tuple[str, str]] = {
    "fake": ("tests/unit/test_backend_fake.py", "TestFakeBackend"),
    "local": ("tests/integration/test_backend_local.py", "TestLocalBackend"),
    "slurm": ("tests/integration/test_backend_slurm.py", "TestSlurmBackend"),
    "ray": ("tests/integration/test_backend_ray.py", "TestRayBackend"),
    "kubernetes": ("tests/integration/test_backend_kubernetes.py", "TestKubernetesBackend"),
}
