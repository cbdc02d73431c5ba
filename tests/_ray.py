"""A local Ray for the tests that need one (tests/test_ray_backend.py, tests/test_train_ray.py).

Module-scoped: Ray starts at the first test of a module and shuts down after its last, so its
processes (GCS, raylet, workers) do not linger under the rest of the suite. 2 logical CPUs, no
dashboard, workers' output not forwarded.
"""
from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'guigym[ray]')")
    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
