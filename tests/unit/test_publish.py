"""Publishing outputs to a host directory: copy, link, overwrite, never a silent replace;
to S3 through an object-store seam (the real S3 path is tested against moto's server)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from hetflow.execute.publish import PublishError, publish_step
from hetflow.spec import Publish, Step


def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "r.txt").write_text("result\n")
    (out / "d" / "x").write_text("x\n")
    return out


def step(to: str, mode: str = "copy", names: tuple[str, ...] = ()) -> Step:
    return Step(image="i", outputs=("r.txt", "d"), publish=(Publish(to=to, mode=mode, outputs=names),))  # type: ignore[arg-type]


def test_copy_publishes_files_and_directories_and_the_same_bytes_again_is_fine(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    done = publish_step(step(str(tmp_path / "res")), out, os.getuid(), os.getgid())
    assert (tmp_path / "res" / "r.txt").read_text() == "result\n" and (tmp_path / "res" / "d" / "x").exists()
    assert len(done) == 2
    again = publish_step(step(str(tmp_path / "res")), out, os.getuid(), os.getgid())
    assert all("identical" in line for line in again)


def test_a_different_file_is_never_replaced_unless_told(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "r.txt").write_text("precious\n")
    with pytest.raises(PublishError, match=r"already exists and differs.*mode: overwrite"):
        publish_step(step(str(tmp_path / "res"), names=("r.txt",)), out, 0, 0)
    assert (tmp_path / "res" / "r.txt").read_text() == "precious\n"
    publish_step(step(str(tmp_path / "res"), "overwrite", ("r.txt",)), out, os.getuid(), os.getgid())
    assert (tmp_path / "res" / "r.txt").read_text() == "result\n"


def test_link_makes_a_hard_link(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    publish_step(step(str(tmp_path / "res"), "link", ("r.txt",)), out, 0, 0)
    assert (tmp_path / "res" / "r.txt").stat().st_ino == (out / "r.txt").stat().st_ino


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def exists(self, path: str) -> bool:
        return path in self.objects

    def info(self, path: str) -> dict[str, Any]:
        return {"ETag": '"' + hashlib.md5(self.objects[path], usedforsecurity=False).hexdigest() + '"'}

    def put_file(self, lpath: str, rpath: str) -> None:
        self.objects[rpath] = Path(lpath).read_bytes()

    def find(self, path: str, detail: bool = False) -> Any:
        return {}

    def get_file(self, rpath: str, lpath: str) -> None:
        Path(lpath).write_bytes(self.objects[rpath])


def test_s3_publish_refuses_other_bytes_under_a_key_unless_told(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    fs = FakeS3()
    publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    assert fs.objects["b/p/r.txt"] == b"result\n"
    assert "identical" in publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)[0]
    fs.objects["b/p/r.txt"] = b"other"
    with pytest.raises(PublishError, match=r"s3://b/p/r\.txt already exists"):
        publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    publish_step(step("s3://b/p/", "overwrite", ("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    assert fs.objects["b/p/r.txt"] == b"result\n"
