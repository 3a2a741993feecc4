"""Machine types: the built-in profiles, the hardware key, the token store and settings."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.inventory import PROFILES, Gpu, Node, profile_names, profile_node
from hetflow.registry import MachineTypeConflict, MachineTypeDecl, MachineTypes, load_settings
from hetflow.registry.machines import MachineTypeLimit, hardware_key, suggest_name
from hetflow.registry.server.peers import holder_of, peer_uid
from hetflow.registry.settings import parse_listen


@pytest.mark.parametrize(
    ("name", "arch", "level", "gpus", "sm"),
    [
        ("x86-64-v2", "x86_64", 2, 0, None),
        ("x86-64-v3", "x86_64", 3, 0, None),
        ("haswell-cpu", "x86_64", 3, 0, None),
        ("skylake-avx512-cpu", "x86_64", 4, 0, None),
        ("neoverse-n1-cpu", "aarch64", None, 0, None),
        ("t4-node", "x86_64", 4, 1, "7.5"),
        ("a100-node", "x86_64", 4, 4, "8.0"),
        ("h100-node", "x86_64", 4, 8, "9.0"),
    ],
    ids=lambda v: str(v),
)
def test_profiles_describe_their_hardware(name: str, arch: str, level: int | None, gpus: int, sm: str | None) -> None:
    node = profile_node(name)
    assert node.name == name
    assert (node.cpu.architecture, node.cpu.x86_64_level, len(node.gpus)) == (arch, level, gpus)
    if sm is not None:
        assert {g.compute_capability for g in node.gpus} == {sm}
        assert all(g.cuda_version and not g.fake for g in node.gpus)


def test_every_profile_builds_and_unknown_names_say_what_exists() -> None:
    assert profile_names() == sorted(PROFILES)
    for name in profile_names():
        profile_node(name)
    with pytest.raises(KeyError, match="known: a100-node"):
        profile_node("z80")


def _node(name: str = "n1", **changes: object) -> Node:
    return profile_node("a100-node").model_copy(update={"name": name, **changes})


def test_hardware_key_ignores_what_does_not_pick_builds() -> None:
    base = _node()
    other_gpus = tuple(
        g.model_copy(update={"uuid": f"GPU-{i}", "device_path": f"/x/{i}"}) for i, g in enumerate(base.gpus)
    )
    same = [
        _node("other-host"),
        _node(kernel="6.1.0"),
        _node(memory_bytes=1),
        _node(gpus=other_gpus),
        _node(cpu=base.cpu.model_copy(update={"cores": 2})),
    ]
    assert {hardware_key(n) for n in same} == {hardware_key(base)}


def test_hardware_key_tells_builds_apart() -> None:
    base = _node()
    a_gpu = base.gpus[0]
    different = [
        _node(cpu=base.cpu.model_copy(update={"microarchitecture": "haswell"})),
        _node(cpu=base.cpu.model_copy(update={"x86_64_level": 3})),
        _node(gpus=base.gpus[:1]),  # 1 GPU instead of 4: count decides multi-GPU builds
        _node(gpus=tuple(g.model_copy(update={"cuda_version": "11.8"}) for g in base.gpus)),
        _node(gpus=(Gpu.model_validate({**a_gpu.model_dump(), "compute_capability": "9.0"}),)),
        _node(gpus=()),
    ]
    keys = {hardware_key(n) for n in different} | {hardware_key(base)}
    assert len(keys) == len(different) + 1


def test_suggested_names_read_well_and_are_stable() -> None:
    assert re.fullmatch(r"x86_64-icelake-4xa100-[0-9a-f]{8}", suggest_name(_node()))
    assert suggest_name(_node()) == suggest_name(_node("elsewhere"))
    assert re.fullmatch(r"x86_64-cascadelake-1xt4-[0-9a-f]{8}", suggest_name(profile_node("t4-node")))
    assert re.fullmatch(r"x86_64-x86_64_v2-[0-9a-f]{8}", suggest_name(profile_node("x86-64-v2")))


def test_register_creates_then_joins_by_hardware(tmp_path: Path) -> None:
    types = MachineTypes(tmp_path)
    mt, token, created = types.register(_node("gpu01"))
    assert created and mt.origin == "registered" and mt.node.name == mt.name
    again, token2, created2 = types.register(_node("gpu02"))
    assert (again.name, created2) == (mt.name, False)
    assert token != token2
    assert types.authenticate(mt.name, token) and types.authenticate(mt.name, token2)
    assert types.authenticate(mt.name, "hft_wrong") is None
    assert types.authenticate("nobody", token) is None


def test_a_named_registration_conflicts_with_other_hardware(tmp_path: Path) -> None:
    types = MachineTypes(tmp_path)
    types.register(_node(), name="lab")
    with pytest.raises(MachineTypeConflict, match="other hardware"):
        types.register(profile_node("t4-node"), name="lab")
    with pytest.raises(ValueError, match="must be 1-64 characters"):
        types.register(_node(), name="Bad:Name")


def test_types_and_tokens_survive_a_restart_and_only_hashes_are_kept(tmp_path: Path) -> None:
    mt, token, _ = MachineTypes(tmp_path).register(_node())
    saved = (tmp_path / "machine-types.json").read_text()
    assert token not in saved
    assert stat.S_IMODE((tmp_path / "machine-types.json").stat().st_mode) == 0o600
    reloaded = MachineTypes(tmp_path)
    token_id = reloaded.authenticate(mt.name, token)
    assert token_id is not None and reloaded.has_token_id(mt.name, token_id)
    reloaded.revoke_tokens(mt.name)
    assert MachineTypes(tmp_path).authenticate(mt.name, token) is None


def test_declared_types_get_a_token_file_once(tmp_path: Path) -> None:
    decls = [
        MachineTypeDecl(profile="t4-node"),
        MachineTypeDecl(name="fixed", profile="x86-64-v2", token="hft_" + "f" * 20),
    ]
    made = MachineTypes(tmp_path).declare(decls, tmp_path)
    assert sorted(made) == ["t4-node"]
    token_file = tmp_path / "tokens" / "t4-node"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    types = MachineTypes(tmp_path)
    assert types.declare(decls, tmp_path) == {}  # no new tokens on a restart
    assert types.authenticate("t4-node", token_file.read_text().strip())
    assert types.authenticate("fixed", "hft_" + "f" * 20)
    assert not (tmp_path / "tokens" / "fixed").exists()


def test_the_config_wins_over_the_saved_node(tmp_path: Path) -> None:
    MachineTypes(tmp_path).declare([MachineTypeDecl(name="box", profile="x86-64-v2")], tmp_path)
    types = MachineTypes(tmp_path)
    types.declare([MachineTypeDecl(name="box", profile="haswell-cpu")], tmp_path)
    box = types.get("box")
    assert box is not None and box.node.cpu.microarchitecture == "haswell"


# --- settings -----------------------------------------------------------------------------


def test_settings_from_yaml_with_command_line_on_top(tmp_path: Path) -> None:
    node_file = tmp_path / "nodes.json"
    node_file.write_text(json.dumps([_node("lab01").model_dump(mode="json")]))
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream: http://127.0.0.1:5000/\nstate_dir: state\nbearer_ttl_s: 60\n"
        "machine_types:\n  - profile: t4-node\n  - name: lab\n    node_file: nodes.json\n"
    )
    settings = load_settings(config, listen="127.0.0.1:6000")
    assert settings.upstream == "http://127.0.0.1:5000"
    assert settings.listen == "127.0.0.1:6000"
    assert settings.state_dir == tmp_path / "state"
    assert [d.type_name for d in settings.machine_types] == ["t4-node", "lab"]
    lab = settings.machine_types[1].resolve_node(settings.config_dir)
    assert lab.name == "lab" and len(lab.gpus) == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("listen: 1.2.3.4:5\n", "no upstream registry", id="no-upstream"),
        pytest.param("upstream: ftp://x\n", "must start with http", id="bad-scheme"),
        pytest.param("upstream: http://x\nlisten: nowhere\n", "write HOST:PORT", id="bad-listen"),
        pytest.param("upstream: http://x\nmachine_types: [{profile: z80}]\n", "unknown profile 'z80'", id="profile"),
        pytest.param("upstream: http://x\nmachine_types: [{node_file: n.json}]\n", "needs a name", id="no-name"),
        pytest.param(
            "upstream: http://x\nmachine_types: [{profile: t4-node}, {profile: t4-node}]\n",
            "declared twice: t4-node",
            id="twice",
        ),
        pytest.param("upstream: http://x\nbearer_ttl: 5\n", "bearer_ttl: Extra inputs", id="typo"),
        pytest.param("- a\n- b\n", "mapping of settings", id="not-a-mapping"),
        pytest.param("upstream: [\n", "not valid YAML", id="yaml"),
    ],
)
def test_bad_settings_say_what_to_change(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(text)
    with pytest.raises(UsageError, match=message):
        load_settings(config)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:5080", ("127.0.0.1", 5080)), (":80", ("127.0.0.1", 80)), ("[::1]:5000", ("::1", 5000))],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


def test_one_holder_may_register_max_per_holder_tokens_over_all_types(tmp_path: Path) -> None:
    types = MachineTypes(tmp_path, max_per_holder=3)
    types.register(profile_node("haswell-cpu"), holder="uid:1000")
    types.register(profile_node("t4-node"), holder="uid:1000")
    types.register(profile_node("haswell-cpu"), holder="uid:1000")
    with pytest.raises(MachineTypeLimit, match=r"uid 1000 holds 3 tokens.*max_tokens_per_holder"):
        types.register(profile_node("haswell-cpu"), holder="uid:1000")
    types.register(profile_node("haswell-cpu"), holder="uid:1001")  # another user: its own count
    for _ in range(4):  # the admin token's registrations are not counted per holder
        types.register(profile_node("haswell-cpu"), holder="admin")
    held = [t.holder for t in types.tokens()]
    assert (held.count("uid:1000"), held.count("uid:1001"), held.count("admin")) == (3, 1, 4)


@pytest.mark.parametrize(
    ("how", "left"),
    [
        pytest.param("token", {"uid:1", "uid:2"}, id="by-token"),
        pytest.param("token_id", {"uid:1", "uid:2"}, id="by-id"),
        pytest.param("holder", {"uid:2"}, id="by-holder"),
        pytest.param("machine_type", {"uid:2"}, id="by-type"),
    ],
)
def test_tokens_are_revoked_one_by_one_by_holder_or_by_type(tmp_path: Path, how: str, left: set[str]) -> None:
    types = MachineTypes(tmp_path)
    mt, first, _ = types.register(profile_node("haswell-cpu"), holder="uid:1")
    _, second, _ = types.register(profile_node("haswell-cpu"), holder="uid:1")
    other, third, _ = types.register(profile_node("t4-node"), holder="uid:2")
    first_id = types.authenticate(mt.name, first)
    given = {"token": first, "token_id": first_id, "holder": "uid:1", "machine_type": mt.name}[how]
    gone = MachineTypes(tmp_path).revoke(**{how: given})  # another process, as the CLI is
    assert all(t.machine_type == mt.name and t.holder == "uid:1" for t in gone) and gone
    assert types.authenticate(mt.name, first) is None  # the proxy re-reads the file
    assert (types.authenticate(mt.name, second) is not None) == (how in ("token", "token_id"))
    assert types.authenticate(other.name, third) is not None
    assert {t.holder for t in types.tokens()} == left
    assert MachineTypes(tmp_path).revoke(**{how: given}) == []


def test_a_state_file_from_before_holders_loads_with_unknown_holders(tmp_path: Path) -> None:
    mt, token, _ = MachineTypes(tmp_path).register(profile_node("haswell-cpu"), holder="uid:5")
    raw = json.loads((tmp_path / "machine-types.json").read_text())
    for t in raw["types"][mt.name]["tokens"]:
        del t["holder"]
    (tmp_path / "machine-types.json").write_text(json.dumps(raw))
    again = MachineTypes(tmp_path)
    assert again.authenticate(mt.name, token) is not None
    assert [t.holder for t in again.tokens()] == [""]


def test_the_peer_of_a_loopback_connection_is_its_sockets_owner(tmp_path: Path) -> None:
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        assert peer_uid(client.getsockname(), server.getsockname()) == os.geteuid()
        assert holder_of(client.getsockname(), server.getsockname()) == f"uid:{os.geteuid()}"
    assert holder_of(("192.0.2.7", 4000), ("127.0.0.1", 5080)) == "address:192.0.2.7"
    assert holder_of(None, None) == "unknown"
