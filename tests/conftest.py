"""Shared fixtures: tiny random models of every family (fast) and the embedded Gemma 3 270M (integration)."""
import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never use the network

import pytest

from editkit.models import TINY, load_model


@functools.lru_cache(maxsize=None)
def _load(name):
    return load_model(name, device="cpu")


@pytest.fixture(params=TINY)
def tiny(request):
    """Each tiny model in turn (module-cached; tests that edit weights must restore them)."""
    return _load(request.param)


@pytest.fixture
def tiny_by_name():
    return _load


@pytest.fixture(scope="session")
def gemma():
    """The embedded model (built into the cache on first use, about a minute; then ~5 s)."""
    return _load("gemma-3-270m")


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: end-to-end tests in headless Chromium (deselect: -m 'not browser')")
    config.addinivalue_line("markers", "load: concurrent browser sessions of the served app (deselect: -m 'not load')")
    config.addinivalue_line("markers", "gpu: the CUDA path, skipped without a CUDA GPU (benchmarks/gpu.sh runs them)")
