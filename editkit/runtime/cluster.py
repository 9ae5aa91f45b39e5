# Over 450 lines: in process and on Ray: the worker pool, its retries and the progress of both, kept together.
"""Fan independent work items out: in this process (the default), or over a Ray cluster of model-holding workers.

    items = [Item(evaluate_record, (method, record, hparams), label=f"record {i}") for i, record in ...]
    results = run_items(lm, items, parse_backend("local:2"), progress)   # in item order

An `Item` is a plain picklable description: a module-level function `fn(lm, *args, **kwargs)` and its arguments.
In process, items run one after the other on `lm`, in order: today's serial loop. On Ray, each worker is an actor
that loads the model once by `lm.name` (load_model: embedded id, hub id or folder; from the editkit cache of its
machine) and runs one item at a time; the run's `shared` inputs (statistics C, null spaces, templates) and the
`delta` to compute with (a session's kept edits) go into the object store once and each worker fetches them once.
Items take their seeds as arguments (editkit draws from no global random generator), so an item computes the same
numbers wherever it runs; bitwise equality with a serial run needs the same torch thread count (`Backend.threads`
is 1 per worker: float32 reductions split differently over threads, a last-bit difference).

Several runs may use the workers at once (the jobs of a served app's sessions, each in its own thread): each takes
idle workers up to its fair share, so no run waits for another to end.

Faults: a worker that dies (killed, out of memory) loses only its item in flight, which runs again on another
worker (a replacement is started); results are those of an undisturbed run. Every wait is bounded: connecting,
starting a worker (which loads the model), each item. An unreachable cluster or a model a worker cannot load is
one EditkitError.

Caches: workers read and write the editkit cache of their machine (statistics, templates, trace results), with
the atomic writes of editkit/core/cache.py, so a shared cache folder ($EDITKIT_CACHE on a shared file system) is safe
and a rerun reads what any worker finished. Results files that grow item by item (a resumable evaluation's JSONL)
are written by the caller in `done(i, result)`, called in this process as each item finishes: one writer.
"""
from __future__ import annotations

import logging
import math
import os
import pickle
import socket
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.errors import EditkitError
from ..core.progress import Progress, part, silent

ENV = "EDITKIT_RAY"
DEFAULT_PORT = 6379  # the port `ray start --head` listens on
POLL = 1.0  # seconds between checks of running items (progress, timeouts, cancellation)


@dataclass(frozen=True)
class Item:
    """One unit of work: `fn(lm, *args, **kwargs)`. `fn` must be importable by name (a module-level function),
    the arguments picklable. With `progress=True`, fn also takes a `progress=` callback for its own share of the
    bar (on Ray its latest message is shown about once a second). `label` names it in progress and errors."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    progress: bool = False


@dataclass(frozen=True)
class Backend:
    """Where items run. `address` None: in this process. "local:N": a Ray cluster started here with N worker CPUs
    (no dashboard). "auto": the cluster `ray start --head` started on this machine (or $RAY_ADDRESS). "host[:port]":
    that cluster's head (GCS port, 6379 by default)."""

    address: str | None = None
    workers: int | None = None  # actors; default: N of local:N, else the cluster's CPUs / cpus
    cpus: float = 1.0  # CPUs reserved per worker
    gpus: float = 0.0  # GPUs per worker (the worker then loads the model on CUDA)
    threads: int = 1  # torch threads per worker: 1 when workers share cores
    connect_timeout: float = 30.0  # seconds to reach (or start) the cluster
    start_timeout: float = 300.0  # seconds for a worker to start and load the model
    item_timeout: float = 3600.0  # seconds one item may run
    retries: int = 2  # re-runs of an item whose worker died

    @property
    def ray(self) -> bool:
        return self.address is not None

    @property
    def local(self) -> int | None:
        """N of "local:N" (None for any other address)."""
        if self.address and self.address.startswith("local:"):
            return int(self.address.split(":", 1)[1])
        return None


IN_PROCESS = Backend()


def parse_backend(spec: str | None, **settings) -> Backend:
    """The backend a `--ray` value or $EDITKIT_RAY names: None/"" in process, "local" (this machine's cores),
    "local:N", "auto", or an address "host[:port]"; `settings` are further Backend fields."""
    spec = (spec or "").strip()
    if not spec:
        return Backend(**settings)
    if spec == "local":
        spec = f"local:{os.cpu_count() or 1}"
    if spec.startswith("local:"):
        n = spec.split(":", 1)[1]
        if not n.isdigit() or not 1 <= int(n) <= 1024:
            raise EditkitError(f"'{spec}': local:N needs N, the number of worker CPUs, a whole number from 1")
    elif spec.startswith("ray://"):
        raise EditkitError("Ray Client addresses (ray://) are not supported: run editkit on a node of the cluster "
                           "and give the head's address host:port (GCS port, 6379 by default)")
    elif spec != "auto":
        host, _, port = spec.partition(":")
        if not host or any(c.isspace() for c in spec) or (port and not port.isdigit()) or ":" in port:
            raise EditkitError(f"'{spec}' is not a Ray address: give host:port, auto or local:N")
        spec = f"{host}:{port or DEFAULT_PORT}"
    return Backend(address=spec, **settings)


def backend_from_env() -> Backend:
    """The app's backend: $EDITKIT_RAY (unset: in process)."""
    return parse_backend(os.environ.get(ENV))


def run_items(lm, items: list[Item], backend: Backend | None = None, progress: Progress | None = None, *,
              shared: dict | None = None, delta=None, done: Callable[[int, Any], None] | None = None) -> list:
    """Run every item and return their results in item order (see module docstring).

    `shared`: large inputs every item needs, passed to fn as `shared=` (on Ray: put in the object store once).
    `delta`: a WeightDelta, or a list of them (a session's kept edits, summed as isolation.session does), that
    every item computes with (inside weights.applied). `done(i, result)` runs here as each item finishes (in
    completion order on Ray): write resumable results there. `progress(fraction, message)` may raise Cancelled."""
    items = list(items)
    backend = backend or IN_PROCESS
    if delta is not None and not isinstance(delta, dict):
        from ..model.weights import combined

        delta = combined(list(delta))
    if not items:
        return []
    if backend.ray:
        return _on_ray(lm, items, backend, _monotone(progress or silent), shared, delta or None, done)
    return _in_process(lm, items, progress, shared, delta or None, done)


def run_one(lm, item: Item, backend: Backend | None = None, progress: Progress | None = None, *, delta=None):
    """One item, e.g. a served app's long job: in process it is simply called, inside weights.applied(delta), with
    `progress` as it is (the item's own messages); on Ray it runs on one worker (run_items)."""
    backend = backend or IN_PROCESS
    if backend.ray:
        return run_items(lm, [item], backend, progress, delta=delta)[0]
    from ..model.weights import applied, combined

    delta = combined(list(delta)) if delta is not None and not isinstance(delta, dict) else delta
    with applied(lm, delta or {}):
        return _call(item, lm, None, progress)


def _monotone(progress: Progress) -> Progress:
    """The bar never goes back (running items' own fractions are counted until they finish)."""
    shown = [0.0]

    def report(fraction: float, message: str) -> None:
        shown[0] = max(shown[0], fraction)
        progress(shown[0], message)
    return report


def _call(item: Item, lm, shared, progress: Progress | None):
    extra = {} if shared is None else {"shared": shared}
    if item.progress:
        extra["progress"] = progress or silent
    return item.fn(lm, *item.args, **item.kwargs, **extra)


def _name(item: Item, i: int, n: int) -> str:
    return item.label or f"item {i + 1}/{n}"


def _in_process(lm, items, progress, shared, delta, done) -> list:
    """Today's serial loop: each item in order, on `lm`, in this thread."""
    from ..model.weights import applied

    n, out = len(items), []
    with applied(lm, delta or {}):
        for i, item in enumerate(items):
            if progress:
                progress(i / n, f"{_name(item, i, n)} ({i + 1} of {n})")
            result = _call(item, lm, shared, part(progress, i / n, (i + 1) / n, f"{_name(item, i, n)}: "))
            out.append(result)
            if done:
                done(i, result)
    if progress:
        progress(1.0, f"{n} of {n} done")
    return out


# --- Ray --------------------------------------------------------------------------------------------------------
def _ray():
    try:
        import ray
    except ImportError:
        raise EditkitError("running on a Ray cluster needs the `ray` package (pip install -r requirements.txt)") \
            from None
    return ray


class Worker:
    """A Ray actor's state: the model, loaded once by `start`, and the run's shared inputs, fetched once."""

    def __init__(self, name: str, threads: int, device: str | None):
        self.name, self.threads, self.device = name, threads, device
        self.lm = None
        self.fetched: dict = {}  # object id -> value: the shared inputs and delta of the current run
        self.status = (0.0, "")

    def start(self) -> dict:
        """Load the model; {"error": message} for a model it cannot load (so the driver says why)."""
        import torch

        from ..core.paths import cache_dir
        from ..model.loading import load_model

        torch.set_num_threads(self.threads)
        t0 = time.perf_counter()
        try:
            self.lm = load_model(self.name, device=self.device)
        except EditkitError as exc:
            return {"error": str(exc)}
        return {"pid": os.getpid(), "host": socket.gethostname(), "load_s": round(time.perf_counter() - t0, 2),
                "rss_mb": _rss_mb(), "cache": str(cache_dir())}

    def _fetch(self, box):
        import ray

        if box is None:
            return None
        key = box[0].hex()
        if key not in self.fetched:
            if len(self.fetched) > 4:
                self.fetched.clear()
            self.fetched[key] = ray.get(box[0])
        return self.fetched[key]

    def run(self, item: Item, shared_box, delta_box) -> tuple:
        """("ok", result, "") or ("error", exception, traceback text): an item's own error is the caller's to
        raise, not a dead worker."""
        from ..model.weights import applied

        self.status = (0.0, "")
        try:
            shared, delta = self._fetch(shared_box), self._fetch(delta_box)
            with applied(self.lm, delta or {}):
                result = _call(item, self.lm, shared, lambda f, m: setattr(self, "status", (f, m)))
            return "ok", result, ""
        except Exception as exc:  # noqa: BLE001 - handed back whole
            try:
                pickle.dumps(exc)
            except Exception:  # noqa: BLE001 - an exception that cannot travel
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")
            return "error", exc, traceback.format_exc()

    def progress(self) -> tuple:
        return self.status


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            return round(next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024, 1)
    except (OSError, StopIteration, ValueError):
        return float("nan")


_LOCK = threading.Lock()
_STATE: dict = {"target": None, "owned": False, "actor_class": None, "stop": None, "pending": None}
_POOLS: dict = {}  # (model name, backend settings) -> _Pool


def _probe(address: str, timeout: float) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot reach the Ray cluster at {address} ({exc}); start one with `ray start "
                           f"--head` there, or use --ray local:N") from None


def connect(backend: Backend) -> None:
    """Connect this process to the backend's cluster (start it for local:N), at most once per process; bounded by
    backend.connect_timeout (for local:N at least LOCAL_START seconds: starting Ray's processes on a loaded machine
    takes longer than reaching a running cluster). Callers arriving while a connection is under way, also one whose
    first caller gave up waiting, wait for that one: never a second ray.init."""
    ray = _ray()
    target = backend.address
    if target == "auto" and os.environ.get("RAY_ADDRESS"):
        target = parse_backend(os.environ["RAY_ADDRESS"]).address
    if not backend.local and target != "auto":
        _probe(target, backend.connect_timeout)
    with _LOCK:
        pending = _STATE["pending"]
        if pending is None and ray.is_initialized():
            if _STATE["target"] not in (None, target):
                raise EditkitError(f"this process already uses the Ray cluster {_STATE['target']}; one cluster "
                                   f"per process")
            _STATE["target"] = _STATE["target"] or target
            return
        if pending is not None and pending.target != target:
            raise EditkitError(f"this process is connecting to the Ray cluster {pending.target}; one cluster per "
                               f"process")
        if pending is None:
            kwargs = dict(logging_level=logging.WARNING, log_to_driver=False)
            if backend.local:
                # Workers on this machine import what this process imports and share its cache.
                from ..core.paths import cache_dir

                path = [os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")]
                env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path)), "EDITKIT_CACHE": str(cache_dir())}
                kwargs.update(num_cpus=backend.local, include_dashboard=False, runtime_env={"env_vars": env})
            else:
                kwargs.update(address=target)
            pending = _STATE["pending"] = _Init(target, kwargs)
    timeout = max(backend.connect_timeout, LOCAL_START) if backend.local else backend.connect_timeout
    pending.wait(timeout)


LOCAL_START = 120.0  # seconds a local:N cluster may take to start (measured 12-14 s at a load average of 12-15)


class _Init:
    """ray.init(**kwargs) in a thread that lives until shutdown(). The thread stays because the local cluster's
    processes die with the thread that started them (Ray sets PR_SET_PDEATHSIG), and a short-lived caller (a
    page's script run) must not take them along."""

    def __init__(self, target: str, kwargs: dict):
        self.target, self.error = target, None
        self.ready, self.stop = threading.Event(), threading.Event()
        threading.Thread(target=self._own, args=(kwargs,), daemon=True, name="editkit-ray").start()

    def _own(self, kwargs: dict) -> None:
        try:
            _ray().init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the callers
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.stop.wait()

    def wait(self, timeout: float) -> None:
        """Wait at most `timeout` seconds for the connection; the first caller to see it done records it."""
        if not self.ready.wait(timeout):
            raise EditkitError(f"connecting to the Ray cluster {self.target} did not finish within {timeout:.0f} "
                               f"s (the machine may be busy; it goes on, and the next run waits for it)")
        with _LOCK:
            if _STATE["pending"] is self:
                _STATE["pending"] = None
                if self.error is None:
                    _STATE.update(target=self.target, owned=True, stop=self.stop)
        if self.error is not None:
            raise EditkitError(f"connecting to the Ray cluster {self.target} failed: "
                               f"{_first_line(self.error)}") from None


@dataclass
class _Slot:
    handle: Any
    ready: Any  # ObjectRef of start() until started, then None
    since: float
    info: dict = field(default_factory=dict)
    busy: bool = False


class _Pool:
    """The workers holding one model on one cluster. Several runs may use them at once (a served app's jobs): each
    takes idle workers up to its fair share (the started workers / the runs), so a run that arrives while another
    fills every worker gets the next free one. `lock` guards the workers' state and is held only briefly."""

    def __init__(self, name: str, backend: Backend):
        self.name, self.backend = name, backend
        self.lock = threading.RLock()
        self.slots: list[_Slot] = []
        self.size = backend.workers or backend.local or self._fit()
        self.runs = 0  # runs using the workers now
        self.replaced = 0  # replacements started since the pool was last unused
        self.error = ""  # why the last worker failed to start

    def _fit(self) -> int:
        cpus = _ray().cluster_resources().get("CPU", 1)
        return max(1, int(cpus // max(self.backend.cpus, 1e-3)))

    def add(self) -> None:
        if _STATE["actor_class"] is None:
            _STATE["actor_class"] = _ray().remote(Worker)
        b = self.backend
        handle = _STATE["actor_class"].options(num_cpus=b.cpus, num_gpus=b.gpus, max_restarts=0,
                                               max_concurrency=2).remote(self.name, b.threads,
                                                                         "cuda" if b.gpus else None)
        self.slots.append(_Slot(handle, handle.start.remote(), time.monotonic()))

    def fill(self) -> None:
        with self.lock:
            while len(self.slots) < self.size:
                self.add()

    def drop(self, slot: _Slot) -> None:
        with self.lock:
            if slot in self.slots:
                self.slots.remove(slot)
        try:
            _ray().kill(slot.handle)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def starting(self) -> list:
        with self.lock:
            return [s.ready for s in self.slots if s.ready is not None]

    def ready(self) -> list[_Slot]:
        """The workers that loaded the model (busy or not)."""
        with self.lock:
            return [s for s in self.slots if s.ready is None]

    def idle(self) -> list[_Slot]:
        with self.lock:
            return [s for s in self.slots if s.ready is None and not s.busy]

    def started(self, ref) -> None:
        """A worker's start() finished: it is ready, or dropped with the reason kept in `error`. Several runs may
        see the same start finish; the first one to get here records it."""
        ray = _ray()
        with self.lock:
            slot = next((s for s in self.slots if s.ready == ref), None)
            if slot is None:
                return
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as exc:
                info = {"error": f"the worker process failed ({_first_line(exc)})"}
            if "error" in info:
                self.drop(slot)
                self.error = info["error"]
            else:
                slot.ready, slot.info = None, info

    def wait_started(self, every: bool) -> None:
        """Fill the pool and wait, at most start_timeout, until one worker (`every`: each) has loaded the model;
        an EditkitError if none can (the pool is then closed, unless another run still uses it)."""
        ray = _ray()
        self.fill()
        deadline = time.monotonic() + self.backend.start_timeout
        while self.starting() and (every or not self.ready()):
            ready, _ = ray.wait(self.starting(), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                n = len(self.starting())
                self._fail(f"{n} Ray worker(s) did not start within {self.backend.start_timeout:.0f} s (each asks "
                           f"for {self.backend.cpus:g} CPU(s) and loads '{self.name}'; the cluster has "
                           f"{ray.available_resources().get('CPU', 0):g} free CPUs)")
            self.started(ready[0])
        if not self.ready():
            self._fail(f"a Ray worker could not load model '{self.name}': {self.error}")

    def _fail(self, message: str):
        with self.lock:
            if not self.runs:
                self.close()
        raise EditkitError(message)

    def close(self) -> None:
        for slot in list(self.slots):
            self.drop(slot)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def start_workers(name: str, backend: Backend) -> list[dict]:
    """Connect, start the workers for model `name` (each loads it once) and wait for all of them; returns each
    worker's {pid, host, load_s, rss_mb, cache}. run_items does this on first use (waiting for one worker)."""
    return [s.info for s in _pool(name, backend, every=True).slots]


def _pool(name: str, backend: Backend, every: bool = False) -> _Pool:
    """The workers of `name` on the backend's cluster, one ready at least. One pool holds the cluster at a time:
    a pool for another model or setting stops the idle ones first (their CPUs are reserved)."""
    connect(backend)
    total = _ray().cluster_resources()
    if total.get("CPU", 0) < backend.cpus or total.get("GPU", 0) < backend.gpus:
        raise EditkitError(f"the Ray cluster has {total.get('CPU', 0):g} CPUs and {total.get('GPU', 0):g} GPUs; "
                           f"a worker asks for {backend.cpus:g} and {backend.gpus:g}")
    key = (name, backend.address, backend.workers, backend.cpus, backend.gpus, backend.threads)
    with _LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            for other_key, other in list(_POOLS.items()):
                with other.lock:
                    if not other.runs:  # an unused pool gives its CPUs back
                        other.close()
                        del _POOLS[other_key]
            pool = _POOLS[key] = _Pool(name, backend)
    try:
        pool.wait_started(every)
    except EditkitError:
        with _LOCK, pool.lock:
            if _POOLS.get(key) is pool and not pool.runs:
                del _POOLS[key]
        raise
    return pool


def _on_ray(lm, items, backend, progress, shared, delta, done) -> list:
    ray = _ray()
    from ..model.weights import active_digest

    if active_digest():
        raise EditkitError("edits are active in this context; Ray workers would not see them: pass them to "
                           "run_items as delta= instead")
    pool = _pool(lm.name, backend)
    n = len(items)
    boxes = ([ray.put(shared)] if shared is not None else None, [ray.put(delta)] if delta else None)
    todo, tries = deque(range(n)), [0] * n
    results: list = [None] * n
    running: dict = {}  # ObjectRef of run() -> (slot, item index, start time)
    finished = 0
    with pool.lock:
        if not pool.runs:
            pool.replaced = 0
        pool.runs += 1
    try:
        while finished < n:
            starting, workers = _dispatch(pool, todo, running, items, boxes)
            if not running and not starting and not workers:
                raise EditkitError(f"no Ray worker is left for '{lm.name}' ({pool.replaced} replaced"
                                   + (f"; the last could not start: {pool.error})" if pool.error else ")"))
            ready = []
            if running or starting:
                ready, _ = ray.wait(list(running) + starting, num_returns=1, timeout=POLL)
            else:
                time.sleep(POLL)  # every worker computes another run's items: wait for a free one
            for ref in ready:
                if ref not in running:
                    pool.started(ref)
                    continue
                slot, i, _t0 = running.pop(ref)
                got = _result(ray, ref, pool, slot, i, items, tries, todo)
                if got is _LOST:
                    continue
                results[i], finished = got, finished + 1
                if done:
                    done(i, got)
                progress(finished / n, f"{_name(items[i], i, n)} done ({finished} of {n})")
            _check_time(running, items, backend)
            _check_start(pool, backend)
            if not ready:
                _report(progress, running, items, finished, n)
    except BaseException:
        for slot, _i, _t in running.values():
            pool.drop(slot)  # stop what they compute; the next run starts replacements
        raise
    finally:
        with pool.lock:
            pool.runs -= 1
    return results



def _dispatch(pool: _Pool, todo: deque, running: dict, items, boxes) -> tuple[list, int]:
    """Start items on this run's fair share of the idle workers; (the workers still starting, all workers)."""
    with pool.lock:
        share = max(1, math.ceil(len(pool.ready()) / pool.runs))
        for slot in pool.idle():
            if not todo or len(running) >= share:
                break
            i = todo.popleft()
            slot.busy = True
            running[slot.handle.run.remote(items[i], *boxes)] = (slot, i, time.monotonic())
        return pool.starting(), len(pool.slots)


_LOST = object()  # a finished item's worker died: the item went back to the queue (_lost)


def _result(ray, ref, pool: _Pool, slot: _Slot, i: int, items, tries, todo):
    """The value a worker computed for item i; _LOST when the worker died (the item is queued again); a worker's
    error raised here, named by its item."""
    try:
        status, value, tb = ray.get(ref)
    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
        _lost(pool, slot, i, items, tries, todo, exc)
        return _LOST
    slot.busy = False
    if status == "error":
        _raise(value, tb, _name(items[i], i, len(items)))
    return value

def _lost(pool: _Pool, slot: _Slot, i: int, items, tries, todo, exc) -> None:
    """A worker died with item i in flight: drop it, start a replacement, queue the item again."""
    pool.drop(slot)
    tries[i] += 1
    if tries[i] > pool.backend.retries:
        raise EditkitError(f"{_name(items[i], i, len(items))}: its Ray worker died {tries[i]} times "
                           f"({_first_line(exc)})")
    with pool.lock:
        if pool.replaced < pool.size:
            pool.replaced += 1
            pool.add()
    todo.appendleft(i)


def _raise(exc: BaseException, tb: str, name: str):
    if isinstance(exc, EditkitError):
        raise exc
    raise RuntimeError(f"{name} failed on a Ray worker:\n{tb}") from exc


def _check_time(running: dict, items, backend: Backend) -> None:
    now = time.monotonic()
    for _, i, t0 in running.values():
        if now - t0 > backend.item_timeout:
            raise EditkitError(f"{_name(items[i], i, len(items))} ran longer than {backend.item_timeout:.0f} s on "
                               f"a Ray worker")


def _check_start(pool: _Pool, backend: Backend) -> None:
    """Replacement workers that never start are dropped after start_timeout."""
    now = time.monotonic()
    with pool.lock:
        slots = list(pool.slots)
    for slot in slots:
        if slot.ready is not None and now - slot.since > backend.start_timeout:
            pool.drop(slot)


def _report(progress: Progress, running: dict, items, finished: int, n: int) -> None:
    """Between completions: the running items' own progress (items with progress=True), or how many run."""
    ray = _ray()
    polls = {slot.handle.progress.remote(): i for slot, i, _t in running.values() if items[i].progress}
    fractions, messages, own = {}, [], ""
    if polls:
        ready, _ = ray.wait(list(polls), num_returns=len(polls), timeout=POLL / 2)
        for ref in ready:
            try:
                f, m = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            fractions[polls[ref]] = min(max(float(f), 0.0), 1.0)
            if m:
                own = str(m)
                messages.append(f"{_name(items[polls[ref]], polls[ref], n)}: {m}")
    message = f"{finished} of {n} done, {len(running)} running" + ("" if running else
                                                                    " (waiting for a free Ray worker)")
    if n == 1 and own:  # one item (a served app's job): its own words, as in process
        message = own
    elif messages:
        message += f" ({'; '.join(messages[:3])})"
    progress((finished + sum(fractions.values())) / n, message)


def shutdown() -> None:
    """Stop every worker of this process, and the Ray connection (or local cluster) if editkit made it."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
        owned, stop, pending = _STATE["owned"], _STATE["stop"], _STATE["pending"]
        _STATE.update(target=None, owned=False, actor_class=None, stop=None, pending=None)
    if pending is not None:  # a connection under way: take it down once it is made
        pending.ready.wait(LOCAL_START)
        owned, stop = owned or pending.error is None, stop or pending.stop
    for pool in pools:
        pool.close()
    if owned:
        _ray().shutdown()
    if stop is not None:
        stop.set()
