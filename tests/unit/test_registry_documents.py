"""``manifest_problem``: a manifest body must be the JSON of the media type it is labelled with."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetflow.images import DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, OCI_INDEX, OCI_MANIFEST
from hetflow.registry.server.documents import manifest_problem

DIGEST = "sha256:" + "a" * 64
DESC = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": DIGEST, "size": 3}


def manifest(**changes: Any) -> bytes:
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": DESC, "layers": [DESC], **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def index(**changes: Any) -> bytes:
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [DESC], **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


@pytest.mark.parametrize(
    ("body", "label"),
    [
        pytest.param(manifest(), OCI_MANIFEST, id="oci-manifest"),
        pytest.param(manifest(mediaType=None), OCI_MANIFEST, id="oci-manifest-without-its-own-type"),
        pytest.param(manifest(mediaType=DOCKER_MANIFEST), DOCKER_MANIFEST, id="docker-manifest"),
        pytest.param(manifest(layers=[]), OCI_MANIFEST, id="no-layers-artifact"),
        pytest.param(index(), OCI_INDEX, id="oci-index"),
        pytest.param(index(mediaType=DOCKER_MANIFEST_LIST), DOCKER_MANIFEST_LIST, id="docker-list"),
        pytest.param(index(manifests=[]), OCI_INDEX, id="empty-index"),
        pytest.param(index(), OCI_INDEX + "; charset=utf-8", id="label-with-parameters"),
    ],
)
def test_a_document_of_its_labelled_type_passes(body: bytes, label: str) -> None:
    assert manifest_problem(body, label) is None


@pytest.mark.parametrize(
    ("body", "label", "named"),
    [
        pytest.param(b"<html>sign in</html>", OCI_MANIFEST, "not JSON", id="html"),
        pytest.param(b"\xff\xfe", OCI_INDEX, "not JSON", id="not-utf8"),
        pytest.param(b"[1]", OCI_MANIFEST, "JSON list", id="list"),
        pytest.param(manifest(), "text/html", "not an OCI or Docker", id="label-not-a-manifest-type"),
        pytest.param(manifest(), OCI_INDEX, "mediaType", id="says-manifest-labelled-index"),
        pytest.param(manifest(schemaVersion=1), OCI_MANIFEST, "schemaVersion is 1", id="schema-1"),
        pytest.param(manifest(config=None), OCI_MANIFEST, "'config'", id="no-config"),
        pytest.param(manifest(layers="x"), OCI_MANIFEST, "'layers' list", id="layers-not-a-list"),
        pytest.param(manifest(layers=[{**DESC, "size": -1}]), OCI_MANIFEST, "layers[0]", id="negative-size"),
        pytest.param(manifest(layers=[DESC, {**DESC, "digest": "nope"}]), OCI_MANIFEST, "layers[1]", id="bad-digest"),
        pytest.param(manifest(config={**DESC, "size": True}), OCI_MANIFEST, "'config'", id="bool-size"),
        pytest.param(index(manifests=None), OCI_INDEX, "'manifests' list", id="index-without-manifests"),
        pytest.param(index(manifests=["x"]), OCI_INDEX, "manifests[0]", id="index-entry-not-an-object"),
        pytest.param(index(mediaType=7), OCI_INDEX, "mediaType is '7'", id="type-not-a-string"),
    ],
)
def test_anything_else_is_named(body: bytes, label: str, named: str) -> None:
    problem = manifest_problem(body, label)
    assert problem is not None and named in problem, problem
