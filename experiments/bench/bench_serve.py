"""Benchmark: ``augury serve`` on loopback. Goals (issue 25): predict p99 < 10 ms at >= 200
requests/s sustained for 60 s on 2 cores; plan for the 50-operator DAG p99 < 150 ms with 10
concurrent clients. Prints figures (not a timed test).

Starts a real server (``python -m augury serve``, its own process, with its default worker
processes unless ``--processes`` says otherwise) on 127.0.0.1 with the bundled ``wordcount``
model and ``bench_plan``'s 50-operator DAG, then:

1. predict, open loop: request i is due at ``i / --rate`` s for ``--duration`` seconds and goes
   out on a free keep-alive connection of ``--connections``; prints the achieved rate, how far
   sends fell behind the schedule, latency percentiles from send to answer and from the due time
   (which also counts the wait for a free connection);
2. plan, closed loop: ``--plan-clients`` connections each asking for the 50-operator DAG's plan
   (a utilization target, and with ``--plan-slo`` a p99 SLO) back to back for
   ``--plan-duration`` seconds; prints throughput and latency percentiles.

Every request differs (the rate varies from one request to the next), so the figures measure
real work, whatever the server might reuse between requests.

The client is one asyncio thread writing pre-built HTTP/1.1 requests on raw keep-alive sockets
and reading the answers by their Content-Length (its status checked, the body not parsed): ~0.1
ms of CPU per request, so the server, not the client, has the 2 cores. (An httpx client in 8
threads cost more CPU than the server did and fell seconds behind the schedule.) Printed beside
the figures: the load average, and the CPU time the server and the client process used per
request (from /proc: the event loop's process and its worker processes; ``time.process_time``):
other work on the machine moves every figure.
(``experiments`` never imports the command line: the server is a subprocess.)

    python experiments/bench/bench_serve.py [--duration 60] [--rate 200] [--plan-duration 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cpu_s(pid: int) -> tuple[float, float]:
    """User + system CPU time of process ``pid`` alone and with its live descendants (the
    server's worker processes), s (/proc)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    tree, total = {pid}, 0
    for _ in range(3):  # children, grandchildren (spawn's resource tracker), ...
        tree |= {p for p, (ppid, _) in stats.items() if ppid in tree}
    total = sum(stats[p][1] for p in tree if p in stats)
    tick = os.sysconf("SC_CLK_TCK")
    return stats.get(pid, (0, 0))[1] / tick, total / tick


def _cpu_line(what: str, server0: tuple[float, float], server1: tuple[float, float], client_s: float, n: int) -> str:
    own, total = (server1[0] - server0[0]) / max(n, 1), (server1[1] - server0[1]) / max(n, 1)
    return (f"  CPU per {what}: server {1e3 * total:.2f} ms (event loop process {1e3 * own:.2f} ms, worker processes "
            f"{1e3 * (total - own):.2f} ms), client {1e3 * client_s / max(n, 1):.2f} ms; load average {_load()}")


class Connection:
    """One keep-alive HTTP/1.1 connection sending pre-built POSTs."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = (f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\n").encode()
        self.reader = self.writer = None

    async def open(self) -> "Connection":
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, body); reconnects once when the server closed the idle connection."""
        for attempt in (0, 1):
            if self.writer is None:
                await self.open()
            self.writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\n" + self.head
                              + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            try:
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close()
                if attempt:
                    raise
                continue
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            return status, await self.reader.readexactly(length)
        raise ConnectionError("unreachable")

    async def answered(self, path: str, body: bytes) -> bool:
        """True when the POST got a 200; an error closes the connection (the next one reopens it)."""
        try:
            return (await self.post(path, body))[0] == 200
        except (OSError, asyncio.IncompleteReadError):
            self.close()
            return False

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def predict_open_loop(port: int, token: str, rate: float, duration_s: float, connections: int,
                            server_pid: int) -> None:
    total = int(rate * duration_s)
    idle: asyncio.Queue = asyncio.Queue()
    for _ in range(connections):
        idle.put_nowait(await Connection("127.0.0.1", port, token).open())
    send_ms, due_ms, late_ms = [], [], []
    errors = [0]
    tasks = []

    async def one(conn: Connection, i: int, due: float) -> None:
        body = json.dumps({"model": "wordcount", "rate": 1000.0 + 0.37 * (i % 10_000),
                           "config": {"split": 3, "count": 4}}).encode()
        sent = time.perf_counter()
        ok = await conn.answered("/v1/predict", body)
        done = time.perf_counter()
        send_ms.append((done - sent) * 1e3)
        due_ms.append((done - due) * 1e3)
        late_ms.append((sent - due) * 1e3)
        errors[0] += 0 if ok else 1
        idle.put_nowait(conn)

    cpu0, client0 = _cpu_s(server_pid), time.process_time()
    start = time.perf_counter() + 0.2
    for i in range(total):
        due = start + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        conn = await idle.get()
        tasks.append(asyncio.create_task(one(conn, i, due)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    cpu1, client_cpu = _cpu_s(server_pid), time.process_time() - client0
    for _ in range(connections):
        (await idle.get()).close()
    late = np.asarray(late_ms)
    print(f"predict (wordcount), open loop at {rate:g} requests/s for {duration_s:g} s, {connections} connections:")
    print(f"  {len(send_ms):,} requests in {elapsed:.1f} s = {len(send_ms) / elapsed:,.1f} requests/s, "
          f"{errors[0]} errors; sends behind schedule: median {np.median(late):.2f} ms, "
          f"p99 {np.percentile(late, 99):.2f} ms")
    print(f"  latency from send:     {_percentiles(send_ms)}")
    print(f"  latency from due time: {_percentiles(due_ms)}")
    print(_cpu_line("request", cpu0, cpu1, client_cpu, total))


async def plan_closed_loop(port: int, token: str, clients: int, duration_s: float, slo: float | None,
                           server_pid: int) -> None:
    conns = [await Connection("127.0.0.1", port, token).open() for _ in range(clients)]
    status, data = await conns[0].post("/v1/predict", json.dumps({"model": "bench50", "rate": 1.0}).encode())
    if status != 200:
        raise SystemExit(f"predict bench50: HTTP {status}: {data[:300]!r}")
    base_rate = 8.0 * json.loads(data)["max_rate"]  # bench_plan's rate
    extra = {} if slo is None else {"latency_slo_ms": slo, "latency_stat": "p99"}
    latencies: list[float] = []
    errors = [0]
    counter = [0]
    end = time.perf_counter() + duration_s

    async def client(conn: Connection) -> None:
        while time.perf_counter() < end:
            counter[0] += 1
            # +- 0.5 % around bench_plan's rate: every request a different plan question
            body = json.dumps({"model": "bench50", "rate": base_rate * (1.0 + 0.01 * ((counter[0] % 101) / 100 - 0.5)),
                               **extra}).encode()
            sent = time.perf_counter()
            ok = await conn.answered("/v1/plan", body)
            latencies.append((time.perf_counter() - sent) * 1e3)
            errors[0] += 0 if ok else 1

    cpu0, client0 = _cpu_s(server_pid), time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in conns))
    elapsed = time.perf_counter() - started
    cpu1, client_cpu = _cpu_s(server_pid), time.process_time() - client0
    for c in conns:
        c.close()
    n = len(latencies)
    what = "utilization target" + (f", p99 SLO {slo:g} ms" if slo is not None else "")
    print(f"plan (50-operator DAG at {base_rate:,.0f} tuples/s +- 0.5 %, {what}), {clients} concurrent clients, "
          f"{duration_s:g} s:")
    print(f"  {n:,} plans in {elapsed:.1f} s = {n / elapsed:,.1f} plans/s, {errors[0]} errors")
    print(f"  latency: {_percentiles(latencies)}")
    print(_cpu_line("plan", cpu0, cpu1, client_cpu, n))


async def _wait_healthy(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            writer.close()
            if head.startswith(b"HTTP/1.1 200"):
                return
        except (OSError, asyncio.IncompleteReadError):
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {server.stderr.read() if server.stderr else ''}")
        await asyncio.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="predict phase, s (default 60; 0 skips it)")
    ap.add_argument("--rate", type=float, default=200.0, help="predict requests/s (default 200)")
    ap.add_argument("--connections", type=int, default=16, help="predict keep-alive connections (default 16)")
    ap.add_argument("--plan-duration", type=float, default=30.0, help="plan phase, s (default 30; 0 skips it)")
    ap.add_argument("--plan-clients", type=int, default=10)
    ap.add_argument("--plan-slo", type=float, default=None, help="p99 SLO of the plans, ms (default none)")
    ap.add_argument("--workers", type=int, default=None, help="the server's --workers (default: its own)")
    ap.add_argument("--processes", type=int, default=None, help="the server's --processes (default: its own)")
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
        command = [sys.executable, "-m", "augury", "serve", "--models", str(models), "--port", str(port),
                   "--token-file", str(tmp / "token"), "--log-level", "warning", "--max-connections", "256"]
        for flag in ("workers", "processes"):
            if getattr(args, flag) is not None:
                command += [f"--{flag}", str(getattr(args, flag))]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        asyncio.run(_wait_healthy(port, server))
        flags = " ".join(command[command.index("--log-level"):])
        print(f"augury serve on http://127.0.0.1:{port} (pid {server.pid}; {flags}); "
              f"load average {_load()}, {os.cpu_count()} CPUs")
        if args.duration > 0:
            asyncio.run(predict_open_loop(port, token, args.rate, args.duration, args.connections, server.pid))
        if args.plan_duration > 0:
            asyncio.run(plan_closed_loop(port, token, args.plan_clients, args.plan_duration, args.plan_slo, server.pid))
        print(f"load average after: {_load()}")
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
