"""Shared fixtures: tiny random models of every family (fast) and the embedded Gemma 3 270M (integration)."""
import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never use the network

import pytest

from editkit.model.loading import TINY, load_model  # before torch: OpenMP's spin count (core/threads.py)

# isort: split
import torch

# Tiny models on one thread: each of their operations is microseconds of work, so a second OpenMP thread
# only adds a barrier per operation, and beside other processes on 2 cores a descheduled partner stalls
# every barrier (docs/reference/testing.md has the measurement). Tests of an embedded model get the
# machine's threads back (`_torch_threads`); subprocesses keep torch's default.
MACHINE_THREADS = torch.get_num_threads()
REAL_MODEL_FIXTURES = {"gemma", "smollm2"}
torch.set_num_threads(1)


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


@pytest.fixture(scope="module")
def ray_local():
    """The Ray backend of a local cluster of 2 CPUs without a dashboard (editkit/runtime/cluster.py starts it
    at the first run that uses it, handing the workers this process's $EDITKIT_CACHE then), torn down after
    the module. One per module: a process uses one cluster at a time. Bounded waits, so a broken cluster fails
    instead of hanging."""
    ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` package (pip install -r requirements.txt)")
    from editkit.runtime import cluster

    yield cluster.parse_backend("local:2", start_timeout=240, item_timeout=240)
    cluster.shutdown()
    assert not ray.is_initialized()


@pytest.fixture(autouse=True)
def _torch_threads(request):
    """One torch thread for a test on tiny models, the machine's for one on an embedded model (see above)."""
    want = MACHINE_THREADS if REAL_MODEL_FIXTURES & set(request.fixturenames) else 1
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


@pytest.fixture(scope="session")
def gemma():
    """The embedded model (built into the cache on first use, about a minute; then ~5 s)."""
    return _load("gemma-3-270m")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="the full suite: also the embedded model at length, browser, load, Ray and notebooks")
    parser.addoption("--full-only", action="store_true",
                     help="only what the quick tier leaves out (CI runs the quick tier, then this)")


# What only the full suite runs: these markers, and every test on a real model or a Ray cluster that is not
# marked `quick` (a few embedded-model checks stay in the quick tier, which must finish in minutes on 2 cores).
FULL_MARKERS = ("full", "browser", "load", "notebook")
FULL_FIXTURES = ("gemma", "smollm2", "ray_local", "ray_lm", "ray_cache")


def in_full_suite_only(item) -> bool:
    if any(item.get_closest_marker(m) for m in FULL_MARKERS):
        return True
    return bool(set(FULL_FIXTURES) & set(getattr(item, "fixturenames", ()))) and not item.get_closest_marker("quick")


def pytest_collection_modifyitems(config, items):
    """The quick tier by default; --full runs everything; --full-only the rest of the full suite."""
    if config.getoption("--full"):
        return
    rest = config.getoption("--full-only")
    keep, drop = [], []
    for item in items:
        (drop if in_full_suite_only(item) != rest else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for every browser test of the run. Playwright's sync API keeps its event loop running
    in this thread while it is open, so a second sync_playwright() in the same run fails ("Sync API inside the
    asyncio loop"): the browser tests share this one."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    from browser_util import chromium_path

    exe = chromium_path()
    if exe is None:
        if os.environ.get("CI"):  # CI installs it (.ci/run): a missing browser is a failure there, not a skip
            pytest.fail("no chromium on the CI machine")
        pytest.skip("no chromium installed (apt-get install -y chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def ray_cache(tmp_path_factory):
    """One editkit cache for this process and the Ray workers (local:N hands its $EDITKIT_CACHE to them)."""
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDITKIT_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def ray_lm(ray_cache):
    """tiny-gpt2 on one torch thread, as each Ray worker: float32 sums split over threads differ in the last bit."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny-gpt2", device="cpu")
    torch.set_num_threads(before)
