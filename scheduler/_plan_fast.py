"""The mean latency of ``modeler.queueing`` one operator at a time, for the planner's exact search.

Units: rates in tuples/s, internal times in seconds (``mean_ms`` converts).

Only for models without broadcast or forward edges (``supported``). There, below saturation, the
visit ratios do not depend on the parallelism, so the model's end-to-end mean latency is exactly

    mean = C + sum_v w_v * sojourn_v + sum_e w_e * batching_e(p_u, p_v)

with constant weights ``w_v`` (the share of the sinks' traffic that passed through v, from the
flow-weighted path mixture; ``w_e`` its split over v's in-edges), ``C`` (the weighted network
delays) and, with output batching, each edge's buffer wait ``min(timeout, fill)/2``, exact once
both ends are assigned and non-decreasing in both parallelisms (its least value, at the smallest
allowed parallelisms, enters the bound of unassigned edges). ``sojourn_v`` depends on v's
own parallelism and on the dispersion of v's input stream, which upstream operators raise through
departure smoothing: ``stream_out = max(stream_in, rho^2 cs2 + (1 - rho^2) stream_in) >=
stream_in``. Every step from a dispersion to the next is non-decreasing (thinning, splitting,
superposition, departures), and the waiting time is non-decreasing in the arrival SCV (the
Allen-Cunneen/KLB form: ``g * (ca2 + cs2)`` has a positive derivative in ``ca2`` on both branches
of ``g``). So the **floor** evaluation, which sets ``stream_out = stream_in`` everywhere, gives
each operator a sojourn ``f_v(p_v)`` that depends on its own parallelism only and is a lower bound
on its sojourn in every configuration: ``C + sum_v w_v f_v(p_v)`` is a separable lower bound on
the mean latency, the basis of the planner's knapsack bound. The **exact** evaluation reproduces
``predict_batch``'s mean (tested to 1e-9 in ``tests/scheduler/test_plan.py``) and is computed
operator by operator in topological order, so a partial assignment of a prefix has exact
sojourns for the prefix.
"""

from __future__ import annotations

import numpy as np

from modeler.queueing import CompiledModel, _superpose, _variability, _waiting, add_copy_pairs


def supported(compiled: CompiledModel) -> bool:
    # Bounded buffers couple an operator's sojourn to its receivers' load (blocking): not a
    # per-operator sum.
    # Shared cores couple every operator's service to every other's load: not per operator.
    return compiled.buffer_tuples is None and compiled.cores is None and \
        not any(e.grouping in ("broadcast", "forward") for e in compiled.model.edges)


class FastMean:
    """Per-operator evaluation of the model's mean latency at one input rate (see module doc)."""

    def __init__(self, compiled: CompiledModel, rate: float) -> None:
        assert supported(compiled)
        c = self.c = compiled
        V = self.V = len(c.names)
        self.rate = float(rate)
        visit = np.zeros(V)
        for v in range(V):
            if not c.in_edges[v]:
                visit[v] = c.source_share[v]
            else:
                visit[v] = sum(e.selectivity * visit[e.u] for e in c.in_edges[v])
        self.visit = visit
        self.processed = visit * self.rate
        self.has_capacity = c.service_s > 0
        top = int(max(c.max_p.max(), 1)) + 1
        self.factor = np.ones((V, top + 1))
        for v, name in enumerate(c.names):
            scaling = c.model.operator(name).scaling
            if scaling.form != "linear":
                self.factor[v] = scaling.factor_at(np.arange(top + 1, dtype=float))
        self.es_table = c.service_s[:, None] * self.factor
        # Copies of one tuple meeting again at a merge: their excess dispersion and clump at v
        # depend on v's own parallelism only (``modeler.queueing._CopyPairs``).
        self.pairs = c.copy_pairs
        # The floor passes on, for v's copy pairs, their least excess over every parallelism v
        # may take (they vary with it only through contention scaling): a constant, so the floor
        # stays separable and below the exact evaluation, and stays tight (passing on none, the
        # 50-operator bench DAG, 26 merges, lost its pruning: 200,000 evaluations for a mean SLO).
        self.pair_floor = np.zeros(V)
        if self.pairs is not None:
            for v in self.pairs.merges:
                p_all = np.arange(max(int(c.min_p[v]), 1), int(c.max_p[v]) + 1)
                es_all = self.es_table[v][p_all]
                extra = self.pairs.excess(v, es_all)
                self.pair_floor[v] = float(extra.min())
        self.even = [all(e.grouping == "shuffle" for e in c.in_edges[v]) for v in range(V)]
        self.in_terms = [[(e.u, e.selectivity, e.batch_var / e.selectivity,
                           e.selectivity + e.batch_var / e.selectivity if e.selectivity > 1 else 1.0,
                           e.selectivity * visit[e.u] * self.rate)
                          for e in c.in_edges[v] if e.selectivity > 0] for v in range(V)]
        # Weights of the sojourns in the end-to-end mean and the constant network part.
        flow = {(e.u, v): e.selectivity * visit[e.u] for v in range(V) for e in c.in_edges[v]}
        w = np.zeros(V)
        sinks = list(c.sinks)
        sink_total = float(visit[sinks].sum())
        if sink_total > 0:
            w[sinks] = visit[sinks] / sink_total
        hop = c.model.network_delay_ms / 1000.0
        const = 0.0
        for v in reversed(range(V)):
            tot = sum(flow[(e.u, v)] for e in c.in_edges[v])
            if not c.in_edges[v] or tot <= 0:
                continue
            const += w[v] * hop
            for e in c.in_edges[v]:
                w[e.u] += w[v] * flow[(e.u, v)] / tot
        self.w = w
        self.const_s = const
        # Output batching adds min(timeout, fill time)/2 per hop, fill time = (records - 1) /
        # (edge rate / channels), channels = p_u * p_v: an exact per-edge term of the mean once
        # both ends are known, non-decreasing in both parallelisms.
        model = c.model
        self.batching = model.buffer_timeout_ms > 0 and model.buffer_records > 1
        self.timeout_s = model.buffer_timeout_ms / 1000.0
        self.records = model.buffer_records
        self.edge_terms = [[] for _ in range(V)]
        for v in range(V):
            tot = sum(flow[(e.u, v)] for e in c.in_edges[v])
            if tot > 0:
                self.edge_terms[v] = [(e.u, w[v] * flow[(e.u, v)] / tot, flow[(e.u, v)] * self.rate)
                                      for e in c.in_edges[v]]

    # ------------------------------------------------------------------ pieces
    def batch_delay(self, v: int, p_v: np.ndarray, p_of) -> np.ndarray:
        """Weighted output-batching wait (s) of the edges into v, as ``predict_batch`` adds it
        to each hop; ``p_of(u)`` gives the rows' parallelism of u."""
        out = np.zeros(len(p_v))
        if not self.batching:
            return out
        for u, w_e, f in self.edge_terms[v]:
            if f <= 0:
                continue
            per_channel = f / (np.asarray(p_of(u), dtype=float) * p_v.astype(float))
            fill = (self.records - 1) / per_channel
            out = out + w_e * np.minimum(self.timeout_s, fill) / 2.0
        return out

    def service(self, v: int, p: np.ndarray) -> np.ndarray:
        return self.es_table[v][p]

    def classes(self, v: int, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(share, count) per instance class, as ``predict_batch`` builds them."""
        pf = p.astype(float)
        if self.even[v]:
            return (1.0 / pf)[:, None], pf[:, None]
        edges = self.c.in_edges[v]
        # Columns past the largest parallelism in the rows are all zero (as in predict_batch).
        width = int(p.max())
        k = np.arange(width)[None, :]
        mask = k < p[:, None]
        flows, parts = [], []
        for e in edges:
            flows.append(e.selectivity * self.visit[e.u])
            if e.grouping == "key":
                parts.append(e.table[p, :width])
            else:
                parts.append(np.where(mask, 1.0 / pf[:, None], 0.0))
        if len(parts) == 1:
            share = parts[0]
        else:
            total = sum(flows)
            share = sum(f * s for f, s in zip(flows, parts)) / (total if total > 0 else 1.0)
            if total <= 0:
                share = parts[0]
        return share, (share > 0).astype(float)

    def max_utilization(self, v: int, p: np.ndarray) -> np.ndarray:
        """Utilization of v's hottest instance at parallelism p (below saturation)."""
        if not self.has_capacity[v]:
            return np.zeros(len(p))
        share, _ = self.classes(v, p)
        return self.processed[v] * share.max(axis=1) * self.service(v, p)

    def step(self, v: int, p: np.ndarray, stream_out: np.ndarray, floor: bool
             ) -> tuple[np.ndarray, np.ndarray]:
        """(sojourn seconds, departure-stream dispersion) of operator v for rows with parallelism
        ``p``; ``stream_out`` [n, V] holds the upstream operators' departure dispersions."""
        if self.even[v] and self.c.in_edges[v]:
            return self._step_even(v, p, stream_out, floor)
        if len(p) > 8 and self.c.in_edges[v]:
            # Many rows share the parallelism and the parents' dispersions (they differ
            # elsewhere): evaluate the wide per-instance-class arrays once per distinct input.
            parents = sorted({e.u for e in self.c.in_edges[v]})
            key = np.column_stack([p.astype(float), stream_out[:, parents]])
            uniq, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
            if len(uniq) < 0.7 * len(p):
                inverse = inverse.reshape(-1)
                so_u = np.ones((len(first), stream_out.shape[1]))
                so_u[:, parents] = stream_out[first][:, parents]
                soj, out = self._step_classes(v, p[first], so_u, floor)
                return soj[inverse], out[inverse]
        return self._step_classes(v, p, stream_out, floor)

    def _step_classes(self, v: int, p: np.ndarray, stream_out: np.ndarray, floor: bool
                      ) -> tuple[np.ndarray, np.ndarray]:
        c = self.c
        n = len(p)
        pf = p.astype(float)
        share, count = self.classes(v, p)
        es = self.service(v, p)[:, None]
        rho = self.processed[v] * share * es
        if not c.in_edges[v]:
            frac = 1.0 / pf
            ca2 = (frac * c.arrival_scv[v] + 1.0 - frac)[:, None] * np.ones_like(share)
            clump = np.ones_like(share)
            stream_in = own = np.full(n, c.arrival_scv[v])
        else:
            parts = []
            num = np.zeros(n)
            den = 0.0
            width = share.shape[1]
            for e in c.in_edges[v]:
                s = e.selectivity
                if s <= 0:
                    continue
                disp = stream_out[:, e.u] * s + e.batch_var / s
                clump_e = s + e.batch_var / s if s > 1 else 1.0
                rate_e = s * self.visit[e.u] * self.rate
                num = num + rate_e * disp
                den += rate_e
                if e.grouping == "shuffle":
                    sh = share if width == 1 else np.where(share > 0, 1.0 / pf[:, None], 0.0)
                    d = (disp / pf)[:, None]
                    m = np.maximum(1.0, clump_e / pf)[:, None]
                    r = rate_e * sh
                else:  # key
                    sh = e.table[p, :width] if width > 1 else (1.0 / pf)[:, None]
                    d = sh * disp[:, None] + 1.0 - sh
                    m = 1.0 - sh + sh * clump_e
                    r = rate_e * sh
                if width > 1:
                    r, d, m = (np.broadcast_to(x, share.shape) for x in (r, d, m))
                else:
                    r, d, m = (np.broadcast_to(x, (n, 1)) for x in (r, d, m))
                parts.append((r, d, m))
            if parts:
                ca2, clump = _superpose(parts)
            else:
                ca2, clump = np.ones_like(share), np.ones_like(share)
            stream_in = num / den if den > 0 else np.ones(n)
            own = stream_in + self.pair_floor[v] if den > 0 else stream_in
            if den > 0 and self.pairs is not None and v in self.pairs.merges and self.has_capacity[v]:
                excess = self.pairs.excess(v, es[:, 0])
                ca2, clump = add_copy_pairs(ca2, clump, excess, share, share > 0)
                stream_in = stream_in + excess
        weight = share * count
        if self.has_capacity[v]:
            cs2 = c.scv[v]
            wq, _ = _waiting(rho, ca2, cs2, es, clump)
            soj = (weight * (wq + es)).sum(axis=1)
            if floor:
                out = own  # v's copy pairs at their least: the floor depends on p_v only
            else:
                rho_op = (weight * rho).sum(axis=1)
                out = np.maximum(stream_in, rho_op**2 * cs2 + (1.0 - rho_op**2) * stream_in)
        else:
            soj = np.zeros(n)
            out = stream_in
        return soj, np.broadcast_to(out, (n,))

    def _step_even(self, v: int, p: np.ndarray, stream_out: np.ndarray, floor: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``step`` for an operator fed by shuffle edges only: one instance class, 1-d arrays.
        The same formulas as ``predict_batch`` (``_superpose``, ``_waiting``) written out."""
        pf = p.astype(float)
        num = 0.0
        clump_num = 0.0
        den = 0.0
        for u, s, bv_s, clump_e, rate_e in self.in_terms[v]:
            disp = stream_out[:, u] * s + bv_s
            num = num + rate_e * disp
            clump_num = clump_num + rate_e * np.maximum(1.0, clump_e / pf)
            den += rate_e
        if den <= 0:
            stream_in = own = np.ones(len(p))
            ca2 = np.ones(len(p))
            clump = 1.0
        else:
            stream_in = num / den
            clump = clump_num / den
            own = stream_in + self.pair_floor[v]  # the floor's: v's pairs at their least (separable)
            if self.pairs is not None and v in self.pairs.merges:
                excess = self.pairs.excess(v, self.service(v, p))
                stream_in = stream_in + excess
                clump = clump + excess / pf
            ca2 = stream_in / pf
        if not self.has_capacity[v]:
            return np.zeros(len(p)), stream_in
        es = self.service(v, p)
        cs2 = self.c.scv[v]
        rho = self.processed[v] / pf * es
        r = np.clip(rho, 1e-12, 1.0 - 1e-12)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            queue1 = np.where(rho > 0, _variability(r, ca2, cs2, clump) * r / (1.0 - r) * es, 0.0)
        soj = queue1 + es * (clump - 1.0) / 2.0 + es
        if floor:
            return soj, own
        return soj, np.maximum(stream_in, rho**2 * cs2 + (1.0 - rho**2) * stream_in)

    def evaluate(self, P: np.ndarray, floor: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(mean latency seconds [n], sojourn seconds [n, V]) for full configurations ``P``."""
        P = np.atleast_2d(P)
        n = P.shape[0]
        so = np.ones((n, self.V))
        soj = np.zeros((n, self.V))
        for v in range(self.V):
            soj[:, v], so[:, v] = self.step(v, P[:, v], so, floor)
        mean = self.const_s + soj @ self.w
        if self.batching:
            for v in range(self.V):
                mean = mean + self.batch_delay(v, P[:, v], lambda u: P[:, u])
        return mean, soj


# ----------------------------------------------------------------------------- search

_LAT_SLACK = 1e-9
"""Relative slack on every pruning comparison: the per-operator sums here and ``predict_batch``
add the same terms in a different order, so their means differ by ~1e-15 relative."""


CHUNK = 20_000
"""Frontier rows descended at once in the mean search (``Knapsack.levels``)."""


class BudgetExhausted(Exception):
    pass


class Knapsack:
    """Exact search over one instance count with the separable floor bound (see ``plan.py``).

    ``ops[t]``: column of variable operator t (in topological order); ``domains[t]``: its allowed
    values from its utilization-minimal count ``b_t`` upward (util-infeasible ones removed);
    ``base``: full configuration (fixed operators at their values).
    """

    def __init__(self, fm: FastMean, ops: list[int], domains: list[np.ndarray], base: np.ndarray,
                 k_cap: int) -> None:
        self.fm, self.ops, self.base = fm, ops, base
        self.G = len(ops)
        self.domains = domains
        self.costs = [d - d[0] for d in domains]
        self.pos = {v: t for t, v in enumerate(ops)}
        self.steps = 0  # operator-steps over rows (work counter)
        V = fm.V
        last_child = np.full(V, -1)
        for v in range(V):
            for e in fm.c.in_edges[v]:
                last_child[e.u] = max(last_child[e.u], v)
        self.live = [np.array([u for u in range(v) if last_child[u] >= v], dtype=np.int64)
                     for v in range(V)]
        """Operators before v whose departure dispersion an operator from v on still reads."""
        self.total = int(sum(int(c[-1]) for c in self.costs))
        """Most extra instances any configuration has."""
        self.full = max(len(d) for d in domains)
        self.rows = 0
        self.global_min = None
        """Least floor mean latency (s) over every configuration (once the tables are full)."""
        self.build(min(k_cap, self.total))

    def tables(self, rows: int) -> None:
        """Floor tables for the first ``rows`` allowed values of every variable operator: row i
        has every variable operator at its i-th value (clipped), one floor pass for all."""
        fm, ops, domains, base = self.fm, self.ops, self.domains, self.base
        rows = min(rows, self.full)
        P = np.repeat(base[None, :], rows, axis=0)
        for v, d in zip(ops, domains):
            P[:, v] = d[np.minimum(np.arange(rows), len(d) - 1)]
        _, soj = fm.evaluate(P, floor=True)
        self.steps += rows * fm.V
        w = fm.w
        self.F = [w[v] * soj[: min(len(d), rows), v] for v, d in zip(ops, domains)]
        # Floor contribution of the fixed operators after each column (constant).
        fixed_floor = np.where(np.isin(np.arange(fm.V), ops), 0.0, w * soj[0])
        if fm.batching:  # least batching wait of each operator's in-edges: all at their minimum
            low = base.copy()
            for v, d in zip(ops, domains):
                low[v] = d[0]
            fixed_floor = fixed_floor + np.array(
                [fm.batch_delay(x, low[x:x + 1], lambda u: low[u:u + 1])[0] for x in range(fm.V)])
        self.fixed_after = np.concatenate([np.cumsum(fixed_floor[::-1])[::-1][1:], [0.0]])
        self.floor_const = fm.const_s + float(fixed_floor.sum())
        self.rows = rows
        if rows >= self.full:
            self.global_min = self.floor_const + float(sum(f.min() for f in self.F))

    def build(self, k_cap: int) -> None:
        """Suffix knapsack: ``S[t][r]`` = least sum of F over operators t.. with exactly r extra
        instances (inf when impossible), for r <= k_cap; ``arg`` reconstructs the choice."""
        K = self.k_cap = int(k_cap)
        if self.rows < min(K + 1, self.full):  # value index i costs at least i instances
            self.tables(max(K + 1, 2 * self.rows))
        G = self.G
        self.S = [None] * (G + 1)
        self.arg = [None] * G
        last = np.full(K + 1, np.inf)
        last[0] = 0.0
        self.S[G] = last
        r = np.arange(K + 1)
        padded_inf = np.inf
        for t in range(G - 1, -1, -1):
            c = self.costs[t]
            n_i = int(np.searchsorted(c, K, side="right"))
            src = r[None, :] - c[:n_i, None]
            cand = np.where(src >= 0, self.F[t][:n_i, None] + last[np.maximum(src, 0)], padded_inf)
            arg = np.argmin(cand, axis=0)
            cur = cand[arg, r]
            self.S[t], self.arg[t] = cur, np.where(np.isfinite(cur), arg, -1)
            last = cur

    def lower_bound(self, k: int) -> float:
        """Least floor mean latency (s) over configurations with exactly k extra instances."""
        return self.floor_const + float(self.S[0][k]) if k <= self.k_cap else -np.inf

    def argmin(self, k: int) -> np.ndarray:
        """A configuration reaching ``lower_bound(k)`` (domain indices per variable operator)."""
        out = np.zeros(self.G, dtype=np.int64)
        r = k
        for t in range(self.G):
            i = int(self.arg[t][r])
            out[t] = i
            r -= int(self.costs[t][i])
        return out

    def p_of(self, u: int, idx: np.ndarray) -> np.ndarray:
        """Parallelism of operator u in the rows ``idx`` (domain indices)."""
        t = self.pos.get(u)
        if t is None:
            return np.full(len(idx), self.base[u])
        return self.domains[t][idx[:, t]]

    def config(self, idx: np.ndarray) -> np.ndarray:
        idx = np.atleast_2d(idx)
        P = np.repeat(self.base[None, :], idx.shape[0], axis=0)
        for t, (v, d) in enumerate(zip(self.ops, self.domains)):
            P[:, v] = d[idx[:, t]]
        return P

    def levels(self, targets: list[tuple[int, float]], budget: int, max_frontier: int = 50_000,
               chunk: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every (k, threshold_s) in ``targets``: every configuration with exactly k extra
        instances whose exact mean latency (s) is at most threshold_s (with slack), as (domain
        indices [n, G], mean seconds [n], k [n]). The levels share one pass.

        Branch and bound in topological order: a partial assignment's operators have exact
        sojourns (all their ancestors are assigned), the rest contribute their floor tables
        through the knapsack ``S``; a node is dropped when that bound exceeds its threshold.

        With ``chunk`` (the statistic is the mean), a frontier larger than ``chunk`` is split
        and the parts descend one after the other, most promising first; a complete
        configuration found at level k then drops every row of a higher level and lowers level
        k's threshold to its mean (only the lowest level and its lowest mean matter), and the
        frontier never exceeds ``chunk`` rows times one operator's branching. Without it, more
        than ``max_frontier`` rows raise ``BudgetExhausted``, as do more than ``budget``
        operator-steps in either case."""
        fm = self.fm
        assert all(k <= self.k_cap for k, _ in targets)
        n0 = len(targets)
        lev = np.array([k for k, _ in targets], dtype=np.int64)
        state = (np.zeros((n0, self.G), dtype=np.int64), lev.copy(), np.full(n0, fm.const_s),
                 np.ones((n0, fm.V)), lev,
                 np.array([t for _, t in targets], dtype=float) * (1 + _LAT_SLACK))
        self._leaves: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._best: dict[int, float] = {}
        self._descend(0, state, budget, max_frontier, chunk)
        if not self._leaves:
            return np.zeros((0, self.G), dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
        return tuple(np.concatenate(x) for x in zip(*self._leaves))

    def _descend(self, v0: int, state: tuple, budget: int, max_frontier: int, chunk: int | None) -> None:
        fm = self.fm
        V = fm.V
        w = fm.w
        idx, rem, acc, so, lev, thr = state
        for v in range(v0, V):
            if chunk and self._best:
                k_best = min(self._best)
                keep = lev <= k_best
                thr = np.where(lev == k_best, np.minimum(thr, self._best[k_best] * (1 + _LAT_SLACK)), thr)
                if not keep.all():
                    idx, rem, acc, so, lev, thr = idx[keep], rem[keep], acc[keep], so[keep], lev[keep], thr[keep]
                if len(rem) == 0:
                    return
            t = self.pos.get(v)
            if t is None:
                p_v = np.full(len(rem), self.base[v], dtype=np.int64)
                soj, out = fm.step(v, p_v, so, floor=False)
                acc = acc + w[v] * soj
                if fm.batching:
                    acc = acc + fm.batch_delay(v, p_v, lambda u: self.p_of(u, idx))
                so[:, v] = out
            else:
                cost, F, S_next = self.costs[t], self.F[t], self.S[t + 1]
                n_i = int(min(len(cost), np.searchsorted(cost, int(rem.max()), side="right")))
                ci = np.arange(n_i)
                newrem = rem[:, None] - cost[None, :n_i]
                ok = newrem >= 0
                sep = acc[:, None] + F[None, :n_i] + S_next[np.maximum(newrem, 0)] + self.fixed_after[v]
                ok &= sep <= thr[:, None]
                r, c = np.nonzero(ok)
                if len(r) == 0:
                    return
                rem, lev, thr = newrem[r, c], lev[r], thr[r]
                idx = idx[r]
                idx[:, t] = ci[c]
                live = self.live[v]
                so_r = np.empty((len(r), V))
                so_r[:, live] = so[np.ix_(r, live)]  # only columns later operators read
                so = so_r
                p_v = self.domains[t][ci[c]]
                soj, out = fm.step(v, p_v, so, floor=False)
                acc = acc[r] + w[v] * soj
                if fm.batching:
                    acc = acc + fm.batch_delay(v, p_v, lambda u: self.p_of(u, idx))
                so[:, v] = out
                bound = acc + S_next[rem] + self.fixed_after[v]
                keep = bound <= thr
                if not keep.all():
                    idx, rem, acc, so, lev, thr = idx[keep], rem[keep], acc[keep], so[keep], lev[keep], thr[keep]
                    bound = bound[keep]
                self.steps += len(rem)
                if self.steps > budget:
                    raise BudgetExhausted
                if len(rem) == 0:
                    return
                if chunk and len(rem) > chunk and v < V - 1:
                    order = np.lexsort((bound, lev))  # lowest level, then lowest bound, first
                    for start in range(0, len(order), chunk):
                        part = order[start:start + chunk]
                        self._descend(v + 1, (idx[part], rem[part], acc[part], so[part],
                                              lev[part], thr[part]), budget, max_frontier, chunk)
                    return
                if not chunk and len(rem) > max_frontier:
                    raise BudgetExhausted
                continue
            self.steps += len(rem)
            if self.steps > budget:
                raise BudgetExhausted
            if len(rem) == 0:
                return
        ok = (rem == 0) & (acc <= thr)
        if ok.any():
            self._leaves.append((idx[ok], acc[ok], lev[ok]))
            if chunk:
                for k in np.unique(lev[ok]).tolist():
                    m = float(acc[ok][lev[ok] == k].min())
                    self._best[k] = min(self._best.get(k, np.inf), m)
