"""``augury serve``: the model over authenticated HTTP (FastAPI + uvicorn).

Units: rates in tuples/s, times in ms (``time_budget_s`` and the request durations of
``/metrics``: s).

The endpoints call the functions the command line calls (``augury.commands.predict.answer`` and
``to_json``, ``plan.answer``, ``validate.answer``, ``whatif.sweep_in_memory``), so each answer is
the ``--json`` object of the same command for the same inputs:

=========================  ==========================================================================
``POST /v1/predict``       ``{"model", "rate", "config"?}`` -> ``augury predict --json``
``POST /v1/plan``          ``{"model", "rate", targets..., "align"?}`` -> ``augury plan --json``
``POST /v1/validate``      ``{"model", "rate", "config"? | "proposal"?, targets...}`` -> ``augury validate --json``
``POST /v1/whatif``        ``{"model", "rates", "sweep"? | "configs"?, targets...}`` -> ``augury whatif --json``
                           without the keys naming files (``out``, ``tables``, ``plots``, ``engine``)
``POST /v1/admission``     a Kubernetes ``AdmissionReview`` (``augury.admission``)
``GET /v1/models``         name, file, version (sha256 of the file), job, operators, calibration trust
``POST /v1/models/reload`` re-read the model directory: changed files reloaded, bad ones rejected
                           with their error while the previous version keeps serving
``GET /healthz``           no token: ``{"status": "ok", "models": N}``
``GET /metrics``           Prometheus text: requests, errors and latency per endpoint
=========================  ==========================================================================

Security: every path but ``/healthz`` needs ``Authorization: Bearer <token>`` (compared with
``hmac.compare_digest``; the token is never logged nor echoed); bodies above
``max_body_bytes`` get 413 before they are parsed; predict, validate and plan are computed in
``processes`` worker processes (``ProcessPool``; with 0, predict and validate on the event loop and
plans on the threads), what-if and admission on ``workers`` threads;
uvicorn answers 503 beyond ``max_connections`` at once; plan and what-if stop at
``time_budget_s`` (422 naming the budget). Every bad request gets a 4xx JSON
``{"error", "field", "value"}``; no traceback ever leaves the server.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from modeler.errors import AuguryError, UsageError
from modeler.limits import MAX_PARALLELISM

log = logging.getLogger("augury.serve")

MODEL_SUFFIXES = (".yaml", ".yml", ".json")
"""Files of the model directory that are model files (one model each, named by the file's stem)."""


@dataclass(frozen=True)
class ServeConfig:
    """How ``augury serve`` runs."""

    models_dir: str = "models"
    """Directory of model files (``*.yaml``, ``*.yml``, ``*.json``); a model is named by its file's stem."""
    host: str = "127.0.0.1"
    """Address to bind. Anything but a loopback address needs ``token_file`` and TLS."""
    port: int = 8765
    """TCP port (0: any free port)."""
    token_file: str | None = None
    """File holding the bearer token (its first line, stripped)."""
    cert_file: str | None = None
    """TLS certificate (PEM); with ``key_file`` the server speaks HTTPS only."""
    key_file: str | None = None
    """TLS private key (PEM)."""
    admission_file: str | None = None
    """Mapping file for ``/v1/admission`` (``augury.admission``): deployment -> model, targets, rate."""
    max_body_bytes: int = 1_048_576
    """Largest request body, bytes (413 beyond)."""
    max_connections: int = 64
    """Connections served at once (uvicorn's ``limit_concurrency``: 503 beyond)."""
    workers: int = 2
    """Threads computing what-if sweeps, admission reviews and reloads (and plans without
    ``processes``), one request each."""
    processes: int = 2
    """Worker processes computing predictions, validations and plans (0: none; then predict and
    validate are answered on the event loop and plans on the ``workers`` threads). Threads share
    one interpreter lock: only processes put a second core to work."""
    time_budget_s: float = 10.0
    """Per-request time budget of plan, what-if and admission, s (queueing for a worker included)."""
    request_timeout_s: float = 30.0
    """Budget of a model reload, s. (Predict and validate, one evaluation each, are answered on
    the event loop: a thread hop cost more than the evaluation.)"""
    plan_max_evaluations: int = 200_000
    """Search budget of ``/v1/plan`` (``PlanConfig.max_evaluations``), configurations."""
    whatif_max_rows: int = 1_000_000
    """Largest what-if sweep (configurations x rates) one request may ask for."""
    whatif_max_rates: int = 10_000
    """Most rates in one what-if request."""
    log_level: str = "info"
    """uvicorn's log level (the access log names method, path and status: never a header)."""

    def check(self) -> None:
        """Raise ``UsageError`` (exit 2) naming the flag when the configuration is unsafe or invalid."""
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise UsageError("expected a port in 0..65535", field="--port", value=self.port)
        if (self.cert_file is None) != (self.key_file is None):
            missing = "--key" if self.key_file is None else "--cert"
            raise UsageError("TLS needs both --cert and --key", field=missing)
        if not is_loopback(self.host):
            if self.token_file is None:
                raise UsageError("a non-loopback address needs a bearer token: give --token-file",
                                 field="--token-file", value=None)
            if self.cert_file is None:
                raise UsageError(f"a non-loopback address ({self.host}) needs TLS: give --cert and --key",
                                 field="--cert", value=None)
        if self.token_file is None:
            raise UsageError("every endpoint but /healthz needs a bearer token: give --token-file",
                             field="--token-file")
        for name, value, low in (("--max-body-bytes", self.max_body_bytes, 1), ("--workers", self.workers, 1),
                                 ("--max-connections", self.max_connections, 1), ("--processes", self.processes, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"expected an integer >= {low}", field=name, value=value)
        if not (isinstance(self.time_budget_s, (int, float)) and math.isfinite(self.time_budget_s)
                and self.time_budget_s > 0):
            raise UsageError("expected a number of seconds > 0", field="--time-budget", value=self.time_budget_s)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServeError(AuguryError):
    """A request the service refuses; ``status`` is its HTTP status (4xx)."""

    status: int = 400


class UnknownModel(ServeError):
    status = 404


class BudgetExceeded(ServeError):
    status = 422


class Unauthorized(ServeError):
    status = 401


class Unavailable(ServeError):
    status = 503


def read_token(path: str) -> str:
    """The bearer token: the first line of ``path``, stripped (``UsageError`` when unreadable or empty)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UsageError("no such file", file=path, field="--token-file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read the token file ({type(err).__name__})", file=path, field="--token-file") from None
    token = text.splitlines()[0].strip() if text.strip() else ""
    if len(token) < 16:
        raise UsageError("the token must be at least 16 characters on the first line", file=path,
                         field="--token-file")
    return token


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class LoadedModel:
    name: str
    file: str
    version: str
    """The first 16 hex digits of the file's sha256."""
    model: Any
    """``modeler.modelfile.JobModel``."""
    compiled: Any
    """``modeler.queueing.CompiledModel``."""
    loaded_at: float
    """Unix time, s."""
    text: str = ""
    """The file's text (what the worker processes parse and compile, once per version)."""

    @property
    def ref(self) -> tuple[str, str, str, str]:
        """(name, version, text, file): what a worker process needs to hold this model."""
        return (self.name, self.version, self.text, self.file)

    def info(self) -> dict:
        calibration = self.model.calibration or {}
        trust = calibration.get("trust") if isinstance(calibration, dict) else None
        return {"name": self.name, "file": Path(self.file).name, "version": self.version, "job": self.model.job,
                "operators": list(self.model.operator_names), "calibrated": bool(calibration),
                "trust": trust, "loaded_at": self.loaded_at}


class ModelRegistry:
    """The models of a directory. ``reload()`` swaps in a new mapping at once; a file that fails to
    load is rejected with its error and the name keeps its previous version (if any)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._models: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()
        self.rejected: list[dict] = []

    def get(self, name: str) -> LoadedModel:
        found = self._models.get(name)
        if found is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise UnknownModel(f"unknown model (loaded: {known})", field="model", value=name)
        return found

    def list(self) -> list[LoadedModel]:
        return [self._models[n] for n in sorted(self._models)]

    def __len__(self) -> int:
        return len(self._models)

    def reload(self) -> dict:
        """Re-read the directory; ``{"loaded", "unchanged", "removed", "rejected": [{"file", "error",
        "field", "value"}], "models"}``."""
        from modeler.modelfile import parse_model_text
        from modeler.queueing import compile_model

        with self._lock:
            if not self.directory.is_dir():
                raise UsageError("not a directory", file=str(self.directory), field="--models")
            old = self._models
            new: dict[str, LoadedModel] = {}
            loaded, unchanged, rejected = [], [], []
            for path in sorted(p for p in self.directory.iterdir()
                               if p.suffix.lower() in MODEL_SUFFIXES and p.is_file()):
                name = path.stem
                try:
                    if name in new:
                        raise ServeError(f"a second file for model '{name}' ({Path(new[name].file).name} "
                                         "is loaded)", file=str(path), field="name", value=name)
                    data = path.read_bytes()
                    version = hashlib.sha256(data).hexdigest()[:16]
                    prev = old.get(name)
                    if prev is not None and prev.version == version and prev.file == str(path):
                        new[name] = prev
                        unchanged.append(name)
                        continue
                    text = data.decode("utf-8")
                    model = parse_model_text(text, source=str(path))
                    compiled = compile_model(model)
                    new[name] = LoadedModel(name, str(path), version, model, compiled, time.time(), text)
                    loaded.append(name)
                except (AuguryError, OSError, UnicodeDecodeError) as err:
                    entry = {"file": path.name, "error": str(err) if not isinstance(err, AuguryError) else err.message,
                             "field": getattr(err, "field", None), "value": _jsonable_value(getattr(err, "value", None))}
                    rejected.append(entry)
                    if name in old and name not in new:
                        new[name] = old[name]  # the previous version keeps serving
                        entry["serving"] = old[name].version
                    log.warning("rejected model file %s: %s", path.name, err)
            removed = sorted(set(old) - set(new))
            self._models = new
            self.rejected = rejected
        return {"loaded": loaded, "unchanged": unchanged, "removed": removed, "rejected": rejected,
                "models": sorted(new)}


def warm_up(models: list[tuple[Any, Any]]) -> None:
    """Answer one prediction per model and plan the smallest model once, answers discarded, so the
    first real request does not pay for the lazy imports and numba's compiled kernels (loaded from
    its cache, or compiled): measured 0.7-1.8 s on the first predict otherwise."""
    from augury.commands import plan as plan_cmd
    from augury.commands import predict as predict_cmd
    from augury.commands import validate as validate_cmd  # noqa: F401 (imported for its import cost)

    for model, compiled in models:
        try:
            max_rate = predict_cmd.answer(model, {}, 1.0, compiled=compiled)[0].max_rate
            rate = 0.5 * max_rate if math.isfinite(max_rate) else 1.0
            predict_cmd.to_json(*predict_cmd.answer(model, {}, rate, compiled=compiled))
        except (AuguryError, ArithmeticError, ValueError) as err:  # the model's own answer: not ours to judge
            log.debug("warm-up prediction of %s: %s", model.job, err)
    if models:
        model, compiled = min(models, key=lambda m: len(m[0].operator_names))
        try:
            max_rate = predict_cmd.answer(model, {}, 1.0, compiled=compiled)[0].max_rate
            rate = 0.5 * max_rate if math.isfinite(max_rate) else 1.0
            plan_cmd.to_json(*plan_cmd.answer(model, rate, 0.7, None, "p99", compiled=compiled,
                                              max_evaluations=2_000))
        except (AuguryError, ArithmeticError, ValueError) as err:
            log.debug("warm-up plan of %s: %s", model.job, err)


# ----------------------------------------------------------------------------- worker processes

# What a worker process holds: (name, version) -> (JobModel, CompiledModel), one version per name.
_WORKER_MODELS: dict[tuple[str, str], tuple[Any, Any]] = {}


def _worker_model(ref: tuple[str, str, str | None, str]) -> tuple[Any, Any]:
    """The model ``ref`` = (name, version, text, file), parsed and compiled on first use; the
    server sends the text only with a version this worker has not been sent (``text`` None
    otherwise). A new version of a name replaces the old one."""
    name, version, text, file = ref
    found = _WORKER_MODELS.get((name, version))
    if found is None:
        from modeler.modelfile import parse_model_text
        from modeler.queueing import compile_model

        if text is None:  # the server's account of what this worker holds is wrong: a bug
            raise RuntimeError(f"worker process: model {name} version {version} was never sent")
        model = parse_model_text(text, source=file)
        found = (model, compile_model(model))
        for key in [k for k in _WORKER_MODELS if k[0] == name]:
            del _WORKER_MODELS[key]
        _WORKER_MODELS[(name, version)] = found
    return found


# The tasks answer with the JSON body itself: the encoding is done in the workers, not on the
# server's one event loop, and bytes cross the pipe cheaper than a nested dict.


def _worker_predict(ref, config: dict, rate: float) -> bytes:
    from augury.commands import predict as predict_cmd

    model, compiled = _worker_model(ref)
    return _dumps(predict_cmd.to_json(*predict_cmd.answer(model, config, rate, compiled=compiled)))


def _worker_validate(ref, rate: float, config: dict, u: float, slo: float | None, stat: str) -> bytes:
    from augury.commands import validate as validate_cmd

    model, compiled = _worker_model(ref)
    return _dumps(validate_cmd.answer(model, rate, config, u, slo, stat, compiled=compiled).to_dict())


def _worker_plan(ref, rate: float, u: float, slo: float | None, stat: str, align: bool, max_evaluations: int) -> bytes:
    from augury.commands import plan as plan_cmd

    model, compiled = _worker_model(ref)
    result, restart = plan_cmd.answer(model, rate, u, slo, stat, align, compiled=compiled,
                                      max_evaluations=max_evaluations)
    return _dumps(plan_cmd.to_json(result, restart))


_WORKER_TASKS = {f.__name__: f for f in (_worker_predict, _worker_validate, _worker_plan)}


def _worker_main(conn, refs: list[tuple[str, str, str, str]]) -> None:
    """A worker process: hold the models, warm up, say ``ready``, then answer pickled
    ``(task, ref, args)`` messages on ``conn`` with pickled ``(ok, answer or exception)`` until
    the server closes the pipe or is gone."""
    import os
    import pickle
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the whole group: the server decides
    server = os.getppid()

    def exit_with_the_server() -> None:
        # uvicorn ends on SIGTERM by raising the signal again (no clean-up runs), and a SIGKILL
        # gives no notice at all: a worker must not outlive its server.
        while os.getppid() == server:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=exit_with_the_server, name="augury-serve-parent-watch", daemon=True).start()
    models = []
    for ref in refs:
        try:
            models.append(_worker_model(ref))
        except AuguryError:  # the server loaded it: cannot happen, and a request would say so
            pass
    warm_up(models)
    conn.send_bytes(b"ready")
    while True:
        try:
            task, ref, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            reply = pickle.dumps((True, _WORKER_TASKS[task](ref, *args)))
        except AuguryError as err:  # the request's fault: the server answers 4xx naming the field
            try:
                reply = pickle.dumps((False, err))
            except Exception:  # a value that does not pickle: named by its repr
                plain = ServeError(err.message, file=err.file, field=err.field, value=_jsonable_value(err.value))
                plain.status = getattr(err, "status", 400)
                reply = pickle.dumps((False, plain))
        except Exception as err:  # a bug: its traceback on the server's stderr, a 500 to the client
            traceback.print_exc()
            reply = pickle.dumps((False, RuntimeError(f"worker process: {type(err).__name__}: {err}")))
        conn.send_bytes(reply)


class _Worker:
    def __init__(self, process, conn, held: set) -> None:
        self.process = process
        self.conn = conn
        self.held = held
        """(name, version) of every model this worker was sent (it keeps one version per name)."""
        self.future: asyncio.Future | None = None
        self.loop: asyncio.AbstractEventLoop | None = None


class ProcessPool:
    """``processes`` worker processes (``spawn``: a fresh interpreter each, nothing inherited from
    the server's threads), started and warmed up with the registry's models before the server
    answers, each behind a pipe the event loop reads: a request is pickled to an idle worker (or
    waits for one) and its answer read back when the pipe is readable. No thread of the server
    takes part (``concurrent.futures``' pool adds a manager and a feeder thread per request's
    path, each taking the interpreter lock in turn). A worker that dies is replaced; the request
    it was answering gets 503."""

    def __init__(self, processes: int, registry: ModelRegistry) -> None:
        import collections

        self.processes = processes
        self.registry = registry
        self.idle: list[_Worker] = []
        self.waiting: collections.deque = collections.deque()
        self.closed = False
        self.idle = self._spawn(processes)
        self.workers: list[_Worker] = list(self.idle)
        """Every live worker, idle or busy."""

    def _spawn(self, n: int) -> list[_Worker]:
        """``n`` new workers, started and ready (blocking: at start, or in a thread)."""
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        refs = [m.ref for m in self.registry.list()]
        started = []
        for _ in range(n):
            mine, theirs = ctx.Pipe(duplex=True)
            process = ctx.Process(target=_worker_main, args=(theirs, refs), name="augury-serve-worker", daemon=True)
            try:
                process.start()
            except RuntimeError as err:
                raise RuntimeError("the worker processes did not start (a script that starts the server needs "
                                   "multiprocessing's `if __name__ == '__main__':` guard; or run with "
                                   f"processes=0): {err}") from None
            theirs.close()
            started.append(_Worker(process, mine, {(r[0], r[1]) for r in refs}))
        for w in started:
            ok = False
            try:
                ok = w.conn.poll(300) and w.conn.recv_bytes() == b"ready"
            except (EOFError, OSError):
                pass
            if not ok:
                for x in started:
                    x.process.kill()
                raise RuntimeError(f"a worker process did not start (exit code {w.process.exitcode}; a script "
                                   "that starts the server needs multiprocessing's `if __name__ == '__main__':` "
                                   "guard; or run with processes=0)")
        return started

    async def run(self, fn: Callable, m: LoadedModel, *args) -> Any:
        """``fn(m's ref, *args)`` in a worker process (``fn``: one of the ``_worker_*`` tasks)."""
        import pickle

        loop = asyncio.get_running_loop()
        worker = await self._acquire(loop)
        key = (m.name, m.version)
        ref = m.ref if key not in worker.held else (m.name, m.version, None, m.file)
        future = loop.create_future()
        worker.future = future
        try:
            worker.conn.send_bytes(pickle.dumps((fn.__name__, ref, args)))
        except OSError:
            self._lost(worker)
            raise Unavailable("a worker process died: ask again", field="processes", value=self.processes) from None
        worker.held = {k for k in worker.held if k[0] != m.name} | {key}
        ok, value = await future
        if not ok:
            raise value
        return value

    async def _acquire(self, loop) -> _Worker:
        if self.closed:
            raise Unavailable("the server is shutting down", field="processes", value=self.processes)
        if self.idle:
            worker = self.idle.pop()
        else:
            waiter = loop.create_future()
            self.waiting.append(waiter)
            try:
                worker = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release(waiter.result())  # handed over as this request was cancelled
                raise
        if worker.loop is not loop:  # the first request on this event loop: read its pipe there
            worker.loop = loop
            loop.add_reader(worker.conn.fileno(), self._readable, worker)
        return worker

    def _release(self, worker: _Worker) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self.idle.append(worker)

    def _readable(self, worker: _Worker) -> None:
        import pickle

        future, worker.future = worker.future, None
        try:
            reply = pickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError, pickle.UnpicklingError):
            self._lost(worker, future)
            return
        self._release(worker)  # before the answer: a request past its budget left it computing
        if future is not None and not future.done():
            future.set_result(reply)

    def _lost(self, worker: _Worker, future: asyncio.Future | None = None) -> None:
        """A worker died (its pipe closed): fail its request with 503 and start a new one."""
        if worker.loop is not None:
            worker.loop.remove_reader(worker.conn.fileno())
        worker.conn.close()
        if worker in self.idle:
            self.idle.remove(worker)
        if worker in self.workers:
            self.workers.remove(worker)
        if future is not None and not future.done():
            future.set_result((False, Unavailable("a worker process died while answering: ask again",
                                                  field="processes", value=self.processes)))
        if self.closed:
            return
        log.error("worker process %s died: starting a new one", worker.process.pid)
        loop = asyncio.get_running_loop()
        replacement = loop.run_in_executor(None, self._spawn, 1)
        def started(f) -> None:
            if f.exception() is not None:
                log.error("could not start a worker process: %s", f.exception())
            elif self.closed:
                f.result()[0].conn.close()
            else:
                self.workers.append(f.result()[0])
                self._release(f.result()[0])
        replacement.add_done_callback(started)

    def shutdown(self) -> None:
        """Close the pipes (the workers exit) and wait for the workers, killing any still
        computing a request past its time budget after 5 s."""
        self.closed = True
        for waiter in self.waiting:
            if not waiter.done():
                waiter.set_exception(Unavailable("the server is shutting down", field="processes"))
        for w in self.workers:
            if w.loop is not None and not w.loop.is_closed():
                w.loop.remove_reader(w.conn.fileno())
            w.conn.close()
        for w in self.workers:
            w.process.join(timeout=5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=5)
        self.workers, self.idle = [], []


# ----------------------------------------------------------------------------- metrics


_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ENDPOINTS = ("/healthz", "/metrics", "/v1/predict", "/v1/plan", "/v1/validate", "/v1/whatif", "/v1/admission",
             "/v1/models", "/v1/models/reload", "/docs", "/openapi.json")


class Metrics:
    """Request counts by endpoint, method and status, and latency histograms by endpoint
    (Prometheus text exposition format 0.0.4)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = {}
        self.hist: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.started = time.time()

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (endpoint, method, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            counts = self.hist.setdefault(endpoint, [0] * (len(_BUCKETS_S) + 1))
            for i, le in enumerate(_BUCKETS_S):
                if seconds <= le:
                    counts[i] += 1
            counts[-1] += 1
            self.sums[endpoint] = self.sums.get(endpoint, 0.0) + seconds

    def text(self, models: int, rejected: int) -> str:
        out = ["# HELP augury_requests_total HTTP requests by endpoint, method and status.",
               "# TYPE augury_requests_total counter"]
        with self._lock:
            for (ep, method, status), n in sorted(self.requests.items()):
                out.append(f'augury_requests_total{{endpoint="{ep}",method="{method}",status="{status}"}} {n}')
            out += ["# HELP augury_request_errors_total HTTP requests answered 4xx or 5xx, by endpoint and status.",
                    "# TYPE augury_request_errors_total counter"]
            for (ep, method, status), n in sorted(self.requests.items()):
                if status >= 400:
                    out.append(f'augury_request_errors_total{{endpoint="{ep}",status="{status}"}} {n}')
            out += ["# HELP augury_request_duration_seconds Time to answer a request, s.",
                    "# TYPE augury_request_duration_seconds histogram"]
            for ep in sorted(self.hist):
                counts = self.hist[ep]
                for le, n in zip(_BUCKETS_S, counts):
                    out.append(f'augury_request_duration_seconds_bucket{{endpoint="{ep}",le="{le:g}"}} {n}')
                out.append(f'augury_request_duration_seconds_bucket{{endpoint="{ep}",le="+Inf"}} {counts[-1]}')
                out.append(f'augury_request_duration_seconds_sum{{endpoint="{ep}"}} {self.sums[ep]:.6f}')
                out.append(f'augury_request_duration_seconds_count{{endpoint="{ep}"}} {counts[-1]}')
        out += ["# HELP augury_models_loaded Models serving.", "# TYPE augury_models_loaded gauge",
                f"augury_models_loaded {models}",
                "# HELP augury_models_rejected Model files rejected by the last load.",
                "# TYPE augury_models_rejected gauge", f"augury_models_rejected {rejected}",
                "# HELP augury_start_time_seconds Unix time the server started.",
                "# TYPE augury_start_time_seconds gauge", f"augury_start_time_seconds {self.started:.3f}"]
        return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- JSON


def _jsonable_value(value: Any) -> Any:
    """``value`` as JSON (non-finite floats null, anything else unknown as a short string)."""
    from augury.commands._common import _jsonable

    value = _jsonable(value)
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        text = repr(value)
        return text if len(text) <= 200 else text[:197] + "..."


def error_body(message: str, field: str | None = None, value: Any = None) -> dict:
    return {"error": message, "field": field, "value": _jsonable_value(value)}


def _dumps(payload: Any) -> bytes:
    from augury.commands._common import _jsonable

    return json.dumps(_jsonable(payload), allow_nan=False, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- ASGI middleware


class Guard:
    """The outermost ASGI layer: metrics, bearer token, body size limit.

    Every request is timed and counted (endpoint = the path when it is one of ``ENDPOINTS``,
    else ``other``); every path but ``/healthz`` needs the token; a body longer than the limit is
    refused with 413 before the application sees any of it (the body is read here, then replayed).

    ``fast``: path -> ``async (body bytes) -> answer bytes or None`` for POST endpoints answered
    here, past FastAPI's routing and middleware (~0.4 ms of the event loop's ~1 ms per predict on
    the 2-core benchmark machine, where predict's p99 goal is tight): a handler answers a valid
    request with its 200 body, or None to let the application answer it (any request it does
    not take: invalid, an unknown model, an error), so errors keep one implementation."""

    def __init__(self, app, token: str, max_body_bytes: int, metrics: Metrics,
                 fast: dict[str, Callable[[bytes], Any]] | None = None) -> None:
        self.app = app
        self.token = ("Bearer " + token).encode()
        self.max_body = max_body_bytes
        self.metrics = metrics
        self.fast = fast or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        path = scope.get("path", "")
        endpoint = path if path in ENDPOINTS else "other"
        status_box = [500]

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
            await send(message)

        try:
            await self._guarded(scope, receive, send_counted, path)
        finally:
            self.metrics.observe(endpoint, scope.get("method", ""), status_box[0], time.perf_counter() - started)

    async def _guarded(self, scope, receive, send, path):
        if path != "/healthz":
            given = b""
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.token):
                why = "missing bearer token" if not given else "wrong bearer token"
                return await _respond(send, 401, error_body(why, "Authorization", None),
                                      [(b"www-authenticate", b'Bearer realm="augury"')])
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return await _respond(send, 400, error_body("not an integer", "Content-Length", length.decode("latin-1")))
            if declared > self.max_body:
                return await _respond(send, 413, error_body(f"the body is larger than {self.max_body} bytes",
                                                            "body", declared))
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body = message.get("body", b"")
                size += len(body)
                if size > self.max_body:
                    return await _respond(send, 413, error_body(f"the body is larger than {self.max_body} bytes",
                                                                "body", size))
                chunks.append(body)
                if not message.get("more_body", False):
                    break
            whole = b"".join(chunks)
            handler = self.fast.get(path) if scope.get("method") == "POST" else None
            if handler is not None:
                payload = await handler(whole)
                if payload is not None:
                    return await _respond_bytes(send, 200, payload)
            sent = [False]

            async def replay():
                if not sent[0]:
                    sent[0] = True
                    return {"type": "http.request", "body": whole, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        return await self.app(scope, receive, send)


async def _respond(send, status: int, payload: dict, headers: list | None = None) -> None:
    await _respond_bytes(send, status, _dumps(payload), headers)


async def _respond_bytes(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- request bodies

Rate = Annotated[float, Field(strict=True, ge=0, le=1e15, allow_inf_nan=False,
                              description="input rate, tuples/s")]
Parallelism = Annotated[int, Field(strict=True, ge=1, le=MAX_PARALLELISM)]
Name = Annotated[str, Field(min_length=1, max_length=200, description="model name (the file's stem)")]

class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")

class TargetsIn(_In):
    latency_slo_ms: Annotated[float, Field(strict=True, gt=0, le=1e12, allow_inf_nan=False)] | None = None
    """End-to-end latency bound, ms (none by default)."""
    latency_stat: Literal["mean", "p95", "p99"] = "p99"
    utilization_target: Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)] | None = None
    """Highest utilization of any instance (default 0.9 with an SLO, else 0.7)."""

class PredictIn(_In):
    model: Name
    rate: Rate
    config: dict[Annotated[str, Field(max_length=200)], Parallelism] = Field(default_factory=dict)

class PlanIn(TargetsIn):
    model: Name
    rate: Rate
    align: bool = False

class ValidateIn(TargetsIn):
    model: Name
    rate: Rate
    config: dict[Annotated[str, Field(max_length=200)], Parallelism] | None = None
    proposal: Any = None
    """Any shape of a proposal file (``docs/scheduler.md``); ``config`` overrides it."""

class WhatifIn(TargetsIn):
    model: Name
    rates: Annotated[str, Field(max_length=200)] | list[Rate]
    """``"A:B:N"`` as ``--rates``, or a list of rates."""
    sweep: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list, max_length=64)
    configs: list[dict[Annotated[str, Field(max_length=200)], Parallelism]] | None = Field(None, max_length=100_000)


# ----------------------------------------------------------------------------- the application


def create_app(config: ServeConfig, token: str, registry: ModelRegistry | None = None):
    """The ASGI application (FastAPI inside ``Guard``). ``registry``: already loaded models
    (default: ``config.models_dir``, loaded now)."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from augury import __version__
    from augury.commands import plan as plan_cmd
    from augury.commands import predict as predict_cmd
    from augury.commands import validate as validate_cmd

    if registry is None:
        registry = ModelRegistry(config.models_dir)
        registry.reload()
    procs = ProcessPool(config.processes, registry) if config.processes > 0 else None
    if procs is None or config.admission_file:  # admission reviews run here (the API server waits ~5 s)
        warm_up([(m.model, m.compiled) for m in registry.list()])
    metrics = Metrics()
    executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="augury-serve")
    mapping_box: list = [None]
    if config.admission_file:
        from augury.admission import load_mapping

        mapping_box[0] = load_mapping(config.admission_file)

    app = FastAPI(title="augury", version=__version__,
                  description="Predict, plan and validate stream-processing jobs' parallelism (augury serve).")
    app.state.registry = registry
    app.state.metrics = metrics
    app.state.config = config

    def targets_of(body: TargetsIn) -> tuple[float, float | None, str]:
        from scheduler.targets import Targets as T

        goal = T(utilization_target=body.utilization_target, latency_slo_ms=body.latency_slo_ms,
                 latency_stat=body.latency_stat)
        return goal.utilization_target, goal.latency_slo_ms, goal.latency_stat

    async def compute(fn: Callable[[], Any], budget_s: float, what: str) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(executor, fn) if callable(fn) else asyncio.ensure_future(fn)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # an answer past the budget: dropped
        try:
            return await asyncio.wait_for(asyncio.shield(future), budget_s)
        except asyncio.TimeoutError:
            raise BudgetExceeded(f"{what} did not finish within the time budget of {budget_s:g} s: ask for less",
                                 field="time_budget_s", value=budget_s) from None

    def deadline_after(budget_s: float) -> Callable[[], None]:
        end = time.monotonic() + budget_s

        def check() -> None:
            if time.monotonic() > end:
                raise BudgetExceeded(f"the sweep did not finish within the time budget of {budget_s:g} s: "
                                     "ask for fewer configurations or rates", field="time_budget_s", value=budget_s)
        return check

    @app.exception_handler(AuguryError)
    async def _augury_error(request: Request, err: AuguryError):
        status = getattr(err, "status", 400)
        status = status if isinstance(status, int) and (400 <= status < 500 or status == 503) else 400
        return Response(_dumps(error_body(err.message, err.field, err.value)), status_code=status,
                        media_type="application/json")

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, err: RequestValidationError):
        errors = err.errors()
        first = errors[0] if errors else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        kind = first.get("type", "")
        if kind == "json_invalid":
            return Response(_dumps(error_body(f"malformed JSON ({first.get('ctx', {}).get('error', 'invalid')})",
                                              "body", None)), status_code=400, media_type="application/json")
        # pydantic's loc for a union names the member type (list[...], str): keep the field path only
        loc = [x for x in loc if not any(c in x for c in "[]()") and x not in ("str", "float", "int", "bool")]
        field = ".".join(loc) or "body"
        value = first.get("input")
        if kind == "missing":
            value = None
        return Response(_dumps(error_body(first.get("msg", "invalid request"), field, value)),
                        status_code=422 if kind != "missing" else 400, media_type="application/json")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException):
        return Response(_dumps(error_body(str(err.detail), "path" if err.status_code in (404, 405) else None,
                                          request.url.path if err.status_code in (404, 405) else None)),
                        status_code=err.status_code, media_type="application/json")

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception):  # a bug: logged here, never sent
        log.exception("internal error on %s", request.url.path)
        return Response(_dumps(error_body("internal error (logged by the server)")), status_code=500,
                        media_type="application/json")

    def answer(payload: Any) -> Response:
        """A 200 JSON answer: ``payload``, or its encoding already (bytes, from a worker process)."""
        return Response(payload if isinstance(payload, bytes) else _dumps(payload), media_type="application/json")

    @app.get("/healthz")
    async def healthz():
        return answer({"status": "ok", "models": len(app.state.registry)})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_text():
        reg = app.state.registry
        return PlainTextResponse(metrics.text(len(reg), len(reg.rejected)),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models():
        reg = app.state.registry
        return answer({"models": [m.info() for m in reg.list()], "rejected": reg.rejected})

    @app.post("/v1/models/reload")
    async def reload():
        return answer(await compute(app.state.registry.reload, config.request_timeout_s, "the reload"))

    @app.post("/v1/predict")
    async def predict(body: PredictIn):
        m = app.state.registry.get(body.model)

        if procs is not None:
            return answer(await procs.run(_worker_predict, m, body.config, body.rate))
        # Without worker processes: one evaluation (~1-3 ms) on the event loop. Handing it to a
        # thread and back cost more than the evaluation (two thread hops, the GIL to and fro).
        return answer(predict_cmd.to_json(*predict_cmd.answer(m.model, body.config, body.rate, compiled=m.compiled)))

    @app.post("/v1/plan")
    async def plan(body: PlanIn):
        m = app.state.registry.get(body.model)
        u, slo, stat = targets_of(body)

        if procs is not None:
            return answer(await compute(procs.run(_worker_plan, m, body.rate, u, slo, stat, body.align,
                                                  config.plan_max_evaluations), config.time_budget_s, "the plan"))

        def run():
            result, restart = plan_cmd.answer(m.model, body.rate, u, slo, stat, body.align, compiled=m.compiled,
                                              max_evaluations=config.plan_max_evaluations)
            return plan_cmd.to_json(result, restart)
        return answer(await compute(run, config.time_budget_s, "the plan"))

    @app.post("/v1/validate")
    async def validate(body: ValidateIn):
        from scheduler.validate import parse_proposal

        m = app.state.registry.get(body.model)
        u, slo, stat = targets_of(body)
        if body.config is None and body.proposal is None:
            raise ServeError("give the proposal as 'config' ({op: p}) or 'proposal'", field="config")
        proposal = {}
        if body.proposal is not None:
            try:
                proposal = parse_proposal(body.proposal)
            except AuguryError as err:
                raise ServeError(err.message, field=f"proposal.{err.field}" if err.field else "proposal",
                                 value=err.value) from None
        cfg = {**proposal, **(body.config or {})}

        if procs is not None:
            return answer(await procs.run(_worker_validate, m, body.rate, cfg, u, slo, stat))
        # one evaluation, as predict: on the event loop
        return answer(validate_cmd.answer(m.model, body.rate, cfg, u, slo, stat, compiled=m.compiled).to_dict())

    @app.post("/v1/whatif")
    async def whatif(body: WhatifIn):
        import numpy as np

        from augury.commands.whatif import sweep_in_memory
        from scheduler import whatif as W

        m = app.state.registry.get(body.model)
        u, slo, stat = targets_of(body)
        goal = W.Targets(utilization_target=u, latency_slo_ms=slo, latency_stat=stat)
        if isinstance(body.rates, str):
            rates = W.parse_rates(body.rates, "rates")
        else:
            if not body.rates:
                raise ServeError("expected at least one rate", field="rates", value=[])
            rates = np.asarray(body.rates, dtype=float)
        if len(rates) > config.whatif_max_rates:
            raise ServeError(f"at most {config.whatif_max_rates:,} rates per request", field="rates",
                             value=len(rates))
        if body.sweep and body.configs is not None:
            raise ServeError("give either 'sweep' or 'configs', not both", field="configs")
        if body.configs is not None:
            if not body.configs:
                raise ServeError("expected at least one configuration", field="configs", value=[])
            space = W.configs_space(m.compiled, body.configs)
        else:
            space = W.sweep_space(m.compiled, [W.parse_sweep(s, "sweep") for s in body.sweep], flag="sweep")
        rows = W.sweep_rows(space, rates)
        if rows > config.whatif_max_rows:
            raise ServeError(f"the sweep would have {rows:,} rows ({space.size:,} configurations x {len(rates):,} "
                             f"rates; this server answers at most {config.whatif_max_rows:,})",
                             field="rates", value=body.rates if isinstance(body.rates, str) else len(rates))
        check = deadline_after(config.time_budget_s)

        def run():
            return sweep_in_memory(m.compiled, space, rates, goal, deadline=check)
        return answer(await compute(run, config.time_budget_s + 1.0, "the sweep"))

    @app.post("/v1/admission")
    async def admission(request: Request):
        from augury.admission import parse_review_body, review

        data = parse_review_body(await request.body())
        if mapping_box[0] is None:
            raise ServeError("this server has no admission mapping (start it with --admission FILE)",
                             field="admission")
        return answer(await compute(lambda: review(data, mapping_box[0], app.state.registry), config.time_budget_s,
                                    "the admission review"))

    app.router.on_shutdown.append(lambda: executor.shutdown(wait=False, cancel_futures=True))
    if procs is not None:
        app.router.on_shutdown.append(procs.shutdown)
    app.state.processes = procs

    async def fast_predict(raw: bytes) -> bytes | None:
        """``/v1/predict`` for a valid request, validated as FastAPI would (``json.loads``, then
        the model in Python mode) and computed by a worker process; None otherwise."""
        try:
            body = PredictIn.model_validate(json.loads(raw))
            m = app.state.registry.get(body.model)
            return await procs.run(_worker_predict, m, body.config, body.rate)
        except Exception:  # invalid, unknown, an error, a bug: the application answers (and logs) it
            return None

    fast = {"/v1/predict": fast_predict} if procs is not None else None
    return Guard(app, token, config.max_body_bytes, metrics, fast)


# ----------------------------------------------------------------------------- running


def uvicorn_config(app, config: ServeConfig):
    import uvicorn

    return uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level,
                          limit_concurrency=config.max_connections, ssl_certfile=config.cert_file,
                          ssl_keyfile=config.key_file, server_header=False, proxy_headers=False,
                          timeout_keep_alive=5, lifespan="on")


class BackgroundServer:
    """A real uvicorn server in a thread, on a socket bound before it starts (tests, benchmarks).

    ``with BackgroundServer(app, ServeConfig(port=0)) as server: server.url``."""

    def __init__(self, app, config: ServeConfig) -> None:
        import uvicorn

        self.config = config
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((config.host, config.port))
        self.port = self.sock.getsockname()[1]
        scheme = "https" if config.cert_file else "http"
        self.url = f"{scheme}://{config.host}:{self.port}"
        self.server = uvicorn.Server(uvicorn_config(app, config))
        self.server.config.log_config = None
        self.thread = threading.Thread(target=self._run, name="augury-serve-test", daemon=True)

    def _run(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> "BackgroundServer":
        self.thread.start()
        end = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > end:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
