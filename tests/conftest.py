"""Shared fixtures: real Ray, a real TVM RPC tracker with real board agents, real databases."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

# A local Ray instance listens on loopback only with this set (see shared notes on Ray).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from db.store import ResultStore
from orchestrator.farm import LocalFarm
from workers import model_zoo


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TVMBENCH_HOME (database, artifact cache, farm state) for one test."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("TVMBENCH_HOME", str(path))
    monkeypatch.delenv("TVMBENCH_DB", raising=False)
    monkeypatch.delenv("TVMBENCH_TRACKER", raising=False)
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    s = ResultStore(f"sqlite:///{tmp_path / 'results.db'}")
    yield s
    s.close()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model zoo written as .onnx files: tiny_cnn, tiny_mlp, two_outputs."""
    path = tmp_path_factory.mktemp("models")
    for name in ("tiny_cnn", "tiny_mlp", "two_outputs"):
        onnx.save(getattr(model_zoo, name)(), path / f"{name}.onnx")
    return path


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray instance for the whole test session (starting one takes seconds)."""
    import ray

    from orchestrator.scheduler import ensure_ray

    ensure_ray(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def local_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFarm]:
    """A real tracker and one real "host" board agent on free loopback ports."""
    farm = LocalFarm.start(tmp_path_factory.mktemp("farm-logs"), {"host": 1})
    yield farm
    farm.stop()


def write_sweep(directory: Path, text: str, name: str = "sweep.toml") -> Path:
    """Write a sweep file into ``directory`` and return its path."""
    path = directory / name
    path.write_text(text)
    return path
