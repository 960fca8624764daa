"""Benchmark: ``augury serve`` on loopback. Goals (issue 25): predict p99 < 10 ms at >= 200
requests/s sustained for 60 s on 2 cores; plan for the 50-operator DAG p99 < 150 ms with 10
concurrent clients. Prints figures (not a timed test).

Starts a real server (``python -m augury serve``, its own process) on 127.0.0.1 with the bundled
``wordcount`` model and ``bench_plan``'s 50-operator DAG, then:

1. predict, open loop: requests scheduled at ``--rate`` per second for ``--duration`` seconds
   from ``--threads`` client threads (httpx, keep-alive); prints the achieved rate, how far the
   clients fell behind the schedule, and latency percentiles (from send to answer);
2. plan, closed loop: ``--plan-clients`` clients each asking for the 50-operator DAG's plan (a
   utilization target, and with ``--plan-slo`` a p99 SLO) back to back for ``--plan-duration``
   seconds; prints throughput and latency percentiles.

The load average is printed too: other work on the machine moves every figure. (``experiments``
never imports the command line: the server is a subprocess, the client plain httpx.)

    python experiments/bench/bench_serve.py [--duration 60] [--rate 200] [--plan-duration 30]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_plan import dag  # noqa: E402

from experiments import bundled  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentiles(ms: list[float]) -> str:
    if not ms:
        return "no answers"
    a = np.asarray(ms)
    return (f"p50 {np.percentile(a, 50):.2f} ms  p95 {np.percentile(a, 95):.2f} ms  "
            f"p99 {np.percentile(a, 99):.2f} ms  max {a.max():.2f} ms")


def predict_open_loop(url: str, token: str, rate: float, duration_s: float, threads: int) -> None:
    total = int(rate * duration_s)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    lateness: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads
    body = {"model": "wordcount", "rate": 1500.0, "config": {"split": 3, "count": 4}}
    start = time.perf_counter() + 0.5

    def worker(j: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as c:
            for i in range(j, total, threads):
                due = start + i / rate
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                sent = time.perf_counter()
                lateness[j].append((sent - due) * 1e3)
                try:
                    r = c.post("/v1/predict", json={**body, "rate": 1000.0 + (i % 100)})
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies[j].append((time.perf_counter() - sent) * 1e3)
                errors[j] += 0 if ok else 1

    pool = [threading.Thread(target=worker, args=(j,)) for j in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    all_ms = [x for part in latencies for x in part]
    late = np.asarray([x for part in lateness for x in part])
    print(f"predict (wordcount), open loop at {rate:g} requests/s for {duration_s:g} s, {threads} client threads:")
    print(f"  {len(all_ms):,} requests in {elapsed:.1f} s = {len(all_ms) / elapsed:,.1f} requests/s, "
          f"{sum(errors)} errors; clients behind schedule: median {np.median(late):.1f} ms, "
          f"p99 {np.percentile(late, 99):.1f} ms")
    print(f"  latency: {_percentiles(all_ms)}")


def plan_closed_loop(url: str, token: str, clients: int, duration_s: float, slo: float | None) -> None:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    body = {"model": "bench50", "rate": 0.0}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        max_rate = c.post("/v1/predict", json={"model": "bench50", "rate": 1.0}).json()["max_rate"]
    body["rate"] = 8.0 * max_rate  # bench_plan's rate
    if slo is not None:
        body.update(latency_slo_ms=slo, latency_stat="p99")
    end = time.perf_counter() + duration_s

    def worker(j: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            while time.perf_counter() < end:
                sent = time.perf_counter()
                try:
                    ok = c.post("/v1/plan", json=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies[j].append((time.perf_counter() - sent) * 1e3)
                errors[j] += 0 if ok else 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(j,)) for j in range(clients)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    all_ms = [x for part in latencies for x in part]
    what = "utilization target" + (f", p99 SLO {slo:g} ms" if slo is not None else "")
    print(f"plan (50-operator DAG at {body['rate']:,.0f} tuples/s, {what}), {clients} concurrent clients, "
          f"{duration_s:g} s:")
    print(f"  {len(all_ms):,} plans in {elapsed:.1f} s = {len(all_ms) / elapsed:,.1f} plans/s, {sum(errors)} errors")
    print(f"  latency: {_percentiles(all_ms)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="predict phase, s (default 60)")
    ap.add_argument("--rate", type=float, default=200.0, help="predict requests/s (default 200)")
    ap.add_argument("--threads", type=int, default=8, help="predict client threads (default 8)")
    ap.add_argument("--plan-duration", type=float, default=30.0, help="plan phase, s (default 30)")
    ap.add_argument("--plan-clients", type=int, default=10)
    ap.add_argument("--plan-slo", type=float, default=None, help="p99 SLO of the plans, ms (default none)")
    ap.add_argument("--workers", type=int, default=2, help="the server's compute threads (default 2)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="augury-bench-serve-"))
    server = None
    try:
        models = tmp / "models"
        models.mkdir()
        shutil.copy(bundled.example("wordcount.yaml"), models / "wordcount.yaml")
        (models / "bench50.json").write_text(json.dumps(dag()))
        token = secrets.token_urlsafe(32)
        (tmp / "token").write_text(token + "\n")
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "augury", "serve", "--models", str(models),
                                   "--port", str(port), "--token-file", str(tmp / "token"), "--log-level", "warning",
                                   "--workers", str(args.workers), "--max-connections", "256"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {server.stderr.read() if server.stderr else ''}")
            time.sleep(0.1)
        print(f"augury serve on {url} (pid {server.pid}, {args.workers} workers); load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
        predict_open_loop(url, token, args.rate, args.duration, args.threads)
        plan_closed_loop(url, token, args.plan_clients, args.plan_duration, args.plan_slo)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
