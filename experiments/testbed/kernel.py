"""The event loop of the testbed: array-only code, compiled with numba when it is installed.

Everything here works on one ``State`` (a namedtuple of numpy arrays, built by
``experiments.testbed.sim``); times are **ms** of simulated time, rates tuples/ms. Without numba
the same functions run as plain Python (identical results, roughly 50x slower).

Model of one instance (global index ``i``, operator ``s.inst_op[i]``):

* an input FIFO ring (``ring_*``, offset ``ring_off[i]``, physical size ``ring_cap[i]``) of
  tuples ``(birth_ms, arrival_ms, key_group)``; a tuple sits in the ring from the moment it is
  sent (``arrival_ms`` in the future = still on the wire) so the credit check ``ring_cnt +
  reserved < limit`` is Flink's credit-based flow control. Arrival times in a ring never
  decrease (a tuple does not overtake one sent earlier to the same instance);
* a server: ``IDLE`` -> (head arrived and not paused) ``BUSY`` for one service time -> emits its
  outputs one by one; a full target queue makes it ``BLOCKED`` (back-pressured) on that target
  until a slot frees (``WAKE``);
* sources: the ring is the external backlog (Kafka lag), filled by ``EXT`` events; a source
  without a service time serves in zero time.

Shared cores (``mf[F_CORES]`` = the job's cores, 0 = unlimited): a service of drawn service time
S (``svc_pool * mean * slow``, any instance with S > 0, sources included) whose operator has
``op_cpu`` = c > 0 is a **CPU phase** of c*S core-ms of work followed by a **wait phase** of
S - c*S ms of wall time that nothing slows. The instances in their CPU phase share the cores
egalitarian processor sharing: with n of them each progresses at ``min(1, cores / n)`` core-ms
per ms. Since they all progress at the same rate, one virtual clock ``mf[F_V]`` (core-ms
received by each of them since the last rebuild; advanced at every change of n from
``mf[F_VT]``) orders their ends: an instance entering at virtual time V with work w ends when
the clock reaches ``cpu_tag`` = V + w. A small heap (``c_v`` / ``c_seq`` / ``c_id``, size
``m[M_NCPU]``) holds the tags, and one ``CPU`` event in the main heap (versioned by
``m[M_CVER]``, superseded whenever n or the smallest tag changes) fires at the wall time the
smallest tag is reached. That event starts the instance's wait phase (a ``COMPLETE`` after
``wait_ms``) or, with nothing to wait, completes it at once. The instance stays ``BUSY`` through
both phases (busy time is wall time, stretched CPU time included). With ``F_CORES`` 0 the loop
takes exactly the unshared path (no CPU events, same draws and event order); the driver sets 0
when the cores are not fewer than the instances that can compute.

Hosts (issue 26; ``inst_host`` all 0 and the rest inert without them): an instance with
``dead[i]`` (its host is lost) drops its COMPLETE / START / WAKE events and starts nothing, so it
holds its queue, its tuple in service and its pending outputs until the driver rebuilds it
elsewhere (a restart replays them). A tuple instance i sends to an instance on another host
arrives ``link_ms[i]`` later (a slow link leaving i's host; with output buffers the channel's
sender ``chan_src`` is looked up at shipping). With ``link_gap[i]`` > 0 (1 / the link's
bandwidth, ms per tuple) i sends a cross-host tuple only when its link is free (``link_free[i]``
<= now; then it is busy for ``link_gap`` more ms): otherwise i is ``BLOCKED`` (back-pressured
time) with a WAKE at ``link_free[i]``, not on any wait list (``blocked_on`` -1).

Random numbers come from pools pre-drawn by the driver (``*_pool``); when one runs low the loop
returns ``NEED_POOL`` before the next event, the driver refills and calls again. The loop also
returns early when the latency buffer or a source backlog is full, or the heap needs room.
"""

from __future__ import annotations

import collections

import numpy as np

from modeler._jit import HAVE_NUMBA, njit  # noqa: F401 (HAVE_NUMBA: read by callers)


# event kinds
START, COMPLETE, WAKE, EXT, FLUSH, CPU = 0, 1, 2, 3, 4, 5
# instance states
IDLE, WAIT, BUSY, BLOCKED = 0, 1, 2, 3
# time categories (acc_time columns)
C_BUSY, C_BP, C_IDLE, C_NONE = 0, 1, 2, 3
# groupings
G_SHUFFLE, G_KEY, G_BROADCAST, G_FORWARD = 0, 1, 2, 3
# return codes
DONE, NEED_POOL, GROW_BACKLOG, LAT_FULL, GROW_HEAP = 0, 1, 2, 3, 4
# slots of the int64 scalar array ``m``
M_HN, M_SEQ, M_UPOS, M_NPOS, M_LATN, M_LOW, M_ARG, M_SPILL = 0, 1, 2, 3, 4, 5, 6, 7
M_NCPU, M_CSEQ, M_CVER = 8, 9, 10  # shared cores: instances in CPU phase, tie counter, CPU event version
N_M = 11
# slots of the float64 scalar array ``mf``
F_NET_MS, F_TIMEOUT_MS, F_NOW = 0, 1, 2
F_CORES, F_V, F_VT = 3, 4, 5  # shared cores: cores (0 = unlimited), virtual clock, its wall time
N_F = 6

POOL_MARGIN = 8192
"""A pool whose cursor passes ``size - POOL_MARGIN`` makes the loop return for a refill."""
MAX_OUT_PER_EDGE = 4096
"""Per-tuple output counts drawn for one edge are clipped to this (documented)."""

STATE_FIELDS = (
    # static structure of the configuration
    "inst_op", "inst_local", "op_first", "op_par", "op_maxp", "op_is_source", "op_is_sink",
    "op_svc_ms", "op_cpu", "op_out_ptr", "op_out_edge",
    "e_dst", "e_kind", "e_random", "e_key_ptr", "e_key_uniform", "e_nkeys", "key_cdf", "key_kg",
    "e_hot_frac", "e_hot_kg", "e_chan_base",
    # rings
    "ring_off", "ring_cap", "ring_head", "ring_cnt", "ring_limit", "reserved", "last_arr",
    "ring_birth", "ring_arr", "ring_kg",
    # server state
    "state", "cur_birth", "cur_arr", "cur_kg", "pend_k", "pend_rem", "pend_tot", "pend_tgt",
    "pend_kg", "blocked_on", "wait_head", "wait_tail", "wait_next", "in_wait", "rr",
    "pause_until", "slow", "evt_time", "evt_kind", "evt_ver",
    # hosts: placement, lost instances, slow links leaving the instance's host
    "inst_host", "dead", "link_ms", "link_gap", "link_free",
    # shared cores: the current service's start and S (also kept without sharing, for a rebuild
    # that turns sharing on), its wait phase, CPU-phase flag and virtual end; the tag heap
    "svc_t0", "svc_len", "wait_ms", "cpu_on", "cpu_tag", "c_v", "c_seq", "c_id",
    # sources
    "ext_next", "ext_rate", "ext_ver",
    # batching channels
    "chan_n", "chan_first", "chan_ver", "chan_dst", "chan_src", "chan_birth", "chan_kg",
    # accounting
    "cat", "cat_since", "acc_time", "q_area", "q_since", "rec_in", "rec_out", "ext_in",
    "soj_sum", "lat_val", "lat_inst",
    # heap
    "h_t", "h_seq", "h_kind", "h_id", "h_ver",
    # random pools
    "u_pool", "svc_pool", "svc_pos", "sel_pool", "sel_pos", "ext_pool", "ext_pos", "net_pool",
    # outputs handed over at a restart (force mode of ``deliver``)
    "spill_j", "spill_birth", "spill_kg",
    # scalars
    "m", "mf",
)
State = collections.namedtuple("State", STATE_FIELDS)


# ---------------------------------------------------------------------------- heap


@njit(cache=True)
def hpush(s, t, kind, idx, ver):
    n = s.m[M_HN]
    seq = s.m[M_SEQ]
    s.m[M_SEQ] = seq + 1
    i = n
    while i > 0:
        p = (i - 1) >> 1
        tp = s.h_t[p]
        if tp < t or (tp == t and s.h_seq[p] < seq):
            break
        s.h_t[i] = tp
        s.h_seq[i] = s.h_seq[p]
        s.h_kind[i] = s.h_kind[p]
        s.h_id[i] = s.h_id[p]
        s.h_ver[i] = s.h_ver[p]
        i = p
    s.h_t[i] = t
    s.h_seq[i] = seq
    s.h_kind[i] = kind
    s.h_id[i] = idx
    s.h_ver[i] = ver
    s.m[M_HN] = n + 1


@njit(cache=True)
def schedule(s, i, t, kind):
    """The instance's one pending event (START / COMPLETE / WAKE); supersedes any earlier one."""
    v = s.evt_ver[i] + 1
    s.evt_ver[i] = v
    s.evt_time[i] = t
    s.evt_kind[i] = kind
    hpush(s, t, kind, i, v)


# --------------------------------------------------------------------------- draws


@njit(cache=True)
def udraw(s):
    pos = s.m[M_UPOS]
    v = s.u_pool[pos]
    pos += 1
    if pos >= s.u_pool.shape[0] - POOL_MARGIN:
        s.m[M_LOW] = 1
        if pos >= s.u_pool.shape[0]:
            pos = 0
    s.m[M_UPOS] = pos
    return v


@njit(cache=True)
def sel_draw(s, e):
    pos = s.sel_pos[e]
    v = s.sel_pool[e, pos]
    pos += 1
    if pos >= s.sel_pool.shape[1] - 2:
        s.m[M_LOW] = 1
        if pos >= s.sel_pool.shape[1]:
            pos = 0
    s.sel_pos[e] = pos
    return v


@njit(cache=True)
def _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, t, kind, idx, ver):
    n = m[M_HN]
    seq = m[M_SEQ]
    m[M_SEQ] = seq + 1
    i = n
    while i > 0:
        p = (i - 1) >> 1
        tp = h_t[p]
        if tp < t or (tp == t and h_seq[p] < seq):
            break
        h_t[i] = tp
        h_seq[i] = h_seq[p]
        h_kind[i] = h_kind[p]
        h_id[i] = h_id[p]
        h_ver[i] = h_ver[p]
        i = p
    h_t[i] = t
    h_seq[i] = seq
    h_kind[i] = kind
    h_id[i] = idx
    h_ver[i] = ver
    m[M_HN] = n + 1


@njit(cache=True)
def _hpop(h_t, h_seq, h_kind, h_id, h_ver, m):
    n = m[M_HN] - 1
    m[M_HN] = n
    if n == 0:
        return
    t = h_t[n]
    seq = h_seq[n]
    kind = h_kind[n]
    idx = h_id[n]
    ver = h_ver[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n:
            tc, tr = h_t[c], h_t[c + 1]
            if tr < tc or (tr == tc and h_seq[c + 1] < h_seq[c]):
                c += 1
        tc = h_t[c]
        if t < tc or (t == tc and seq < h_seq[c]):
            break
        h_t[i] = tc
        h_seq[i] = h_seq[c]
        h_kind[i] = h_kind[c]
        h_id[i] = h_id[c]
        h_ver[i] = h_ver[c]
        i = c
    h_t[i] = t
    h_seq[i] = seq
    h_kind[i] = kind
    h_id[i] = idx
    h_ver[i] = ver


@njit(cache=True)
def _cpush(c_v, c_seq, c_id, m, v, idx):
    """Shared cores: instance idx enters its CPU phase, ending at virtual time v."""
    n = m[M_NCPU]
    seq = m[M_CSEQ]
    m[M_CSEQ] = seq + 1
    i = n
    while i > 0:
        p = (i - 1) >> 1
        vp = c_v[p]
        if vp < v or (vp == v and c_seq[p] < seq):
            break
        c_v[i] = vp
        c_seq[i] = c_seq[p]
        c_id[i] = c_id[p]
        i = p
    c_v[i] = v
    c_seq[i] = seq
    c_id[i] = idx
    m[M_NCPU] = n + 1


@njit(cache=True)
def _cpop(c_v, c_seq, c_id, m):
    """Shared cores: drop the smallest virtual end (its CPU phase is over)."""
    n = m[M_NCPU] - 1
    m[M_NCPU] = n
    if n == 0:
        return
    v = c_v[n]
    seq = c_seq[n]
    idx = c_id[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n:
            if c_v[c + 1] < c_v[c] or (c_v[c + 1] == c_v[c] and c_seq[c + 1] < c_seq[c]):
                c += 1
        if v < c_v[c] or (v == c_v[c] and seq < c_seq[c]):
            break
        c_v[i] = c_v[c]
        c_seq[i] = c_seq[c]
        c_id[i] = c_id[c]
        i = c
    c_v[i] = v
    c_seq[i] = seq
    c_id[i] = idx


@njit(cache=True)
def _cpu_event(h_t, h_seq, h_kind, h_id, h_ver, m, c_v, c_id, now, vnow, speed):
    """Shared cores: (re)schedule the one CPU event at the wall time the smallest virtual end is
    reached at the current speed (the earlier one becomes stale)."""
    t = now + (c_v[0] - vnow) / speed
    if t < now:  # rounding: the virtual clock was advanced a hair past the tag
        t = now
    v = m[M_CVER] + 1
    m[M_CVER] = v
    _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, t, CPU, c_id[0], v)


@njit(cache=True)
def _ship(s, c, now):
    """Send output buffer c: its tuples arrive together after one network delay."""
    n = s.chan_n[c]
    j = s.chan_dst[c]
    m = s.m
    net_base = s.mf[F_NET_MS]
    NN = s.net_pool.shape[0]
    arr = now + net_base
    if NN > 0 and net_base > 0.0:
        arr = now + net_base * s.net_pool[m[M_NPOS]]
        m[M_NPOS] += 1
        if m[M_NPOS] >= NN - POOL_MARGIN:
            m[M_LOW] = 1
            if m[M_NPOS] >= NN:
                m[M_NPOS] = 0
    src = s.chan_src[c]
    if s.link_ms[src] > 0.0 and s.inst_host[j] != s.inst_host[src]:
        arr += s.link_ms[src]
    s.chan_n[c] = 0
    s.chan_ver[c] += 1
    s.reserved[j] -= n
    if n == 0:
        return
    if arr < s.last_arr[j]:
        arr = s.last_arr[j]
    s.last_arr[j] = arr
    s.q_area[j] += s.ring_cnt[j] * (now - s.q_since[j])
    s.q_since[j] = now
    for x in range(n):
        pos = s.ring_head[j] + s.ring_cnt[j]
        if pos >= s.ring_cap[j]:
            pos -= s.ring_cap[j]
        k = s.ring_off[j] + pos
        s.ring_birth[k] = s.chan_birth[c, x]
        s.ring_arr[k] = arr
        s.ring_kg[k] = s.chan_kg[c, x]
        s.ring_cnt[j] += 1
    if s.state[j] == IDLE:
        s.state[j] = WAIT
        t0 = arr if arr > s.pause_until[j] else s.pause_until[j]
        v_ = s.evt_ver[j] + 1
        s.evt_ver[j] = v_
        s.evt_time[j] = t0
        s.evt_kind[j] = START
        _hpush(s.h_t, s.h_seq, s.h_kind, s.h_id, s.h_ver, m, t0, START, j, v_)


@njit(cache=True)
def run(s, t_end):
    """Process every event with time < t_end; return DONE (then the clock is t_end) or a request.

    The hot path lives in this one function with the arrays unpacked into locals once (numba
    pays reference counting on every access to a field of the big state tuple otherwise). It
    does what ``complete`` / ``deliver`` / ``try_start`` / ``ring_push`` do, except that a
    tuple reaching an idle instance schedules a START event instead of starting it inline.
    """
    h_t = s.h_t
    h_seq = s.h_seq
    h_kind = s.h_kind
    h_id = s.h_id
    h_ver = s.h_ver
    m = s.m
    mf = s.mf
    inst_op = s.inst_op
    inst_local = s.inst_local
    op_first = s.op_first
    op_par = s.op_par
    op_maxp = s.op_maxp
    op_is_sink = s.op_is_sink
    op_svc_ms = s.op_svc_ms
    op_cpu = s.op_cpu
    op_out_ptr = s.op_out_ptr
    op_out_edge = s.op_out_edge
    e_dst = s.e_dst
    e_kind = s.e_kind
    e_random = s.e_random
    e_key_ptr = s.e_key_ptr
    e_key_uniform = s.e_key_uniform
    e_nkeys = s.e_nkeys
    key_cdf = s.key_cdf
    key_kg = s.key_kg
    e_hot_frac = s.e_hot_frac
    e_hot_kg = s.e_hot_kg
    e_chan_base = s.e_chan_base
    ring_off = s.ring_off
    ring_cap = s.ring_cap
    ring_head = s.ring_head
    ring_cnt = s.ring_cnt
    ring_limit = s.ring_limit
    reserved = s.reserved
    last_arr = s.last_arr
    ring_birth = s.ring_birth
    ring_arr = s.ring_arr
    ring_kg = s.ring_kg
    state = s.state
    cur_birth = s.cur_birth
    cur_arr = s.cur_arr
    cur_kg = s.cur_kg
    pend_k = s.pend_k
    pend_rem = s.pend_rem
    pend_tot = s.pend_tot
    pend_tgt = s.pend_tgt
    pend_kg = s.pend_kg
    blocked_on = s.blocked_on
    wait_head = s.wait_head
    wait_tail = s.wait_tail
    wait_next = s.wait_next
    in_wait = s.in_wait
    rr = s.rr
    pause_until = s.pause_until
    slow = s.slow
    evt_time = s.evt_time
    evt_kind = s.evt_kind
    evt_ver = s.evt_ver
    inst_host = s.inst_host
    dead = s.dead
    link_ms = s.link_ms
    link_gap = s.link_gap
    link_free = s.link_free
    svc_t0 = s.svc_t0
    svc_len = s.svc_len
    wait_ms = s.wait_ms
    cpu_on = s.cpu_on
    cpu_tag = s.cpu_tag
    c_v = s.c_v
    c_seq = s.c_seq
    c_id = s.c_id
    ext_next = s.ext_next
    ext_rate = s.ext_rate
    ext_ver = s.ext_ver
    chan_n = s.chan_n
    chan_first = s.chan_first
    chan_ver = s.chan_ver
    chan_dst = s.chan_dst
    chan_birth = s.chan_birth
    chan_kg = s.chan_kg
    cat = s.cat
    cat_since = s.cat_since
    acc_time = s.acc_time
    q_area = s.q_area
    q_since = s.q_since
    rec_in = s.rec_in
    rec_out = s.rec_out
    ext_in = s.ext_in
    soj_sum = s.soj_sum
    lat_val = s.lat_val
    lat_inst = s.lat_inst
    u_pool = s.u_pool
    svc_pool = s.svc_pool
    svc_pos = s.svc_pos
    sel_pool = s.sel_pool
    sel_pos = s.sel_pos
    ext_pool = s.ext_pool
    ext_pos = s.ext_pos
    net_pool = s.net_pool

    L = lat_val.shape[0]
    HMAX = h_t.shape[0] // 2
    NU = u_pool.shape[0]
    NN = net_pool.shape[0]
    PS = svc_pool.shape[1]
    PSEL = sel_pool.shape[1]
    PEXT = ext_pool.shape[1]
    net_base = mf[F_NET_MS]
    timeout = mf[F_TIMEOUT_MS]
    cores = mf[F_CORES]
    B = chan_birth.shape[1]
    batching = B > 1

    while m[M_HN] > 0 and h_t[0] < t_end:
        if m[M_LOW]:
            return NEED_POOL
        if m[M_LATN] >= L - 1:
            return LAT_FULL
        if m[M_HN] > HMAX:
            return GROW_HEAP
        now = h_t[0]
        kind = h_kind[0]
        i = h_id[0]
        ver = h_ver[0]
        if kind == EXT and ver == ext_ver[i] and ring_cnt[i] >= ring_cap[i]:
            m[M_ARG] = i
            return GROW_BACKLOG
        _hpop(h_t, h_seq, h_kind, h_id, h_ver, m)
        do_deliver = False
        do_start = False
        if kind == EXT:
            if ver != ext_ver[i]:
                continue
            # external tuple into the source's backlog ring
            ext_in[i] += 1
            q_area[i] += ring_cnt[i] * (now - q_since[i])
            q_since[i] = now
            if now > last_arr[i]:
                last_arr[i] = now
            pos = ring_head[i] + ring_cnt[i]
            if pos >= ring_cap[i]:
                pos -= ring_cap[i]
            k = ring_off[i] + pos
            ring_birth[k] = now
            ring_arr[k] = last_arr[i]
            ring_kg[k] = -1
            ring_cnt[i] += 1
            rate = ext_rate[i]
            if rate > 0.0:
                op = inst_op[i]
                p_ = ext_pos[op]
                tn = now + ext_pool[op, p_] / rate
                p_ += 1
                if p_ >= PEXT - 2:
                    m[M_LOW] = 1
                    if p_ >= PEXT:
                        p_ = 0
                ext_pos[op] = p_
                ext_next[i] = tn
                _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, tn, EXT, i, ext_ver[i])
            else:
                ext_next[i] = np.inf
            if state[i] == IDLE and dead[i] == 0:
                do_start = True
        elif kind == FLUSH:
            if ver == chan_ver[i]:
                _ship(s, i, now)
            continue
        else:
            if kind == CPU:
                if ver != m[M_CVER]:
                    continue
                # the smallest virtual end is reached: that instance's CPU phase is over
                i = c_id[0]
                vnow = c_v[0]
                _cpop(c_v, c_seq, c_id, m)
                mf[F_V] = vnow
                mf[F_VT] = now
                cpu_on[i] = 0
                nc = m[M_NCPU]
                if nc > 0:
                    _cpu_event(h_t, h_seq, h_kind, h_id, h_ver, m, c_v, c_id, now, vnow,
                               1.0 if nc <= cores else cores / nc)
                wt = wait_ms[i]
                if wt > 0.0:  # the wait phase: wall time nothing slows
                    v_ = evt_ver[i] + 1
                    evt_ver[i] = v_
                    evt_time[i] = now + wt
                    evt_kind[i] = COMPLETE
                    _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, now + wt, COMPLETE, i, v_)
                    continue
                kind = COMPLETE  # nothing to wait for: complete now
            elif ver != evt_ver[i]:
                continue
            if dead[i]:
                continue  # its host is lost: it holds what it has until the restart
            evt_kind[i] = -1
            if kind == COMPLETE:
                op = inst_op[i]
                rec_in[i] += 1
                soj_sum[i] += now - cur_arr[i]
                if op_is_sink[op]:
                    n = m[M_LATN]
                    lat_val[n] = now - cur_birth[i]
                    lat_inst[n] = i
                    m[M_LATN] = n + 1
                pend_k[i] = 0
                pend_rem[i] = -1
                pend_tgt[i] = -1
                do_deliver = True
            elif kind == START:
                if state[i] == WAIT or state[i] == IDLE:
                    do_start = True
            else:  # WAKE
                if state[i] == BLOCKED:
                    do_deliver = True

        if do_deliver:
            op = inst_op[i]
            a = op_out_ptr[op]
            nout = op_out_ptr[op + 1] - a
            birth = cur_birth[i]
            blocked = False
            while pend_k[i] < nout:
                kk = pend_k[i]
                e = op_out_edge[a + kk]
                dop = e_dst[e]
                p = op_par[dop]
                dbase = op_first[dop]
                ek = e_kind[e]
                if pend_rem[i] < 0:
                    sp = sel_pos[e]
                    cnt = sel_pool[e, sp]
                    sp += 1
                    if sp >= PSEL - 2:
                        m[M_LOW] = 1
                        if sp >= PSEL:
                            sp = 0
                    sel_pos[e] = sp
                    if ek == G_BROADCAST:
                        cnt *= p
                    pend_rem[i] = cnt
                    pend_tot[i] = cnt
                    pend_tgt[i] = -1
                while pend_rem[i] > 0:
                    j = pend_tgt[i]
                    if j < 0:
                        kg = -1
                        if ek == G_KEY:
                            up = m[M_UPOS]
                            u = u_pool[up]
                            up += 1
                            if up >= NU - POOL_MARGIN:
                                m[M_LOW] = 1
                                if up >= NU:
                                    up = 0
                            m[M_UPOS] = up
                            hot = e_hot_frac[e]
                            if hot > 0.0 and u < hot:
                                kg = e_hot_kg[e]
                            else:
                                if hot > 0.0:
                                    u = (u - hot) / (1.0 - hot)
                                ka = e_key_ptr[e]
                                nk = e_nkeys[e]
                                if e_key_uniform[e]:
                                    idx = int(u * nk)
                                else:
                                    idx = np.searchsorted(key_cdf[ka:ka + nk], u, side="right")
                                if idx >= nk:
                                    idx = nk - 1
                                kg = key_kg[ka + idx]
                            j = dbase + (kg * p) // op_maxp[dop]
                        elif ek == G_FORWARD:
                            j = dbase + inst_local[i]
                        elif ek == G_BROADCAST:
                            j = dbase + (pend_tot[i] - pend_rem[i]) % p
                        elif e_random[e]:
                            up = m[M_UPOS]
                            jj = int(u_pool[up] * p)
                            up += 1
                            if up >= NU - POOL_MARGIN:
                                m[M_LOW] = 1
                                if up >= NU:
                                    up = 0
                            m[M_UPOS] = up
                            if jj >= p:
                                jj = p - 1
                            j = dbase + jj
                        else:
                            r = rr[i, kk]
                            j = dbase + r
                            r += 1
                            if r >= p:
                                r = 0
                            rr[i, kk] = r
                        pend_tgt[i] = j
                        pend_kg[i] = kg
                    if ring_cnt[j] + reserved[j] >= ring_limit[j]:
                        # back pressure: block on j until it frees a slot
                        if state[i] != BLOCKED:
                            state[i] = BLOCKED
                            acc_time[i, cat[i]] += now - cat_since[i]
                            cat[i] = C_BP
                            cat_since[i] = now
                        blocked_on[i] = j
                        if in_wait[i] == 0:
                            in_wait[i] = 1
                            wait_next[i] = -1
                            tl = wait_tail[j]
                            if tl < 0:
                                wait_head[j] = i
                            else:
                                wait_next[tl] = i
                            wait_tail[j] = i
                        blocked = True
                        break
                    gap = link_gap[i]
                    if gap > 0.0 and inst_host[j] != inst_host[i]:
                        lf = link_free[i]
                        if lf > now:
                            # the slow link is still sending the previous tuple: wait for it
                            if state[i] != BLOCKED:
                                state[i] = BLOCKED
                                acc_time[i, cat[i]] += now - cat_since[i]
                                cat[i] = C_BP
                                cat_since[i] = now
                            blocked_on[i] = -1
                            v_ = evt_ver[i] + 1
                            evt_ver[i] = v_
                            evt_time[i] = lf
                            evt_kind[i] = WAKE
                            _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, lf, WAKE, i, v_)
                            blocked = True
                            break
                        link_free[i] = now + gap
                    kg = pend_kg[i]
                    pend_tgt[i] = -1
                    pend_rem[i] -= 1
                    rec_out[i, kk] += 1
                    if batching:
                        c = e_chan_base[e] + inst_local[i] * p + (j - dbase)
                        n = chan_n[c]
                        chan_birth[c, n] = birth
                        chan_kg[c, n] = kg
                        chan_n[c] = n + 1
                        reserved[j] += 1
                        if n == 0:
                            chan_first[c] = now
                            _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, now + timeout, FLUSH, c, chan_ver[c])
                        if n + 1 >= B:  # buffer full: ship it now
                            _ship(s, c, now)
                        continue
                    arr = now + net_base
                    if NN > 0 and net_base > 0.0:
                        arr = now + net_base * net_pool[m[M_NPOS]]
                        m[M_NPOS] += 1
                        if m[M_NPOS] >= NN - POOL_MARGIN:
                            m[M_LOW] = 1
                            if m[M_NPOS] >= NN:
                                m[M_NPOS] = 0
                    if link_ms[i] > 0.0 and inst_host[j] != inst_host[i]:
                        arr += link_ms[i]
                    if arr < last_arr[j]:
                        arr = last_arr[j]
                    last_arr[j] = arr
                    q_area[j] += ring_cnt[j] * (now - q_since[j])
                    q_since[j] = now
                    pos = ring_head[j] + ring_cnt[j]
                    if pos >= ring_cap[j]:
                        pos -= ring_cap[j]
                    k = ring_off[j] + pos
                    ring_birth[k] = birth
                    ring_arr[k] = arr
                    ring_kg[k] = kg
                    ring_cnt[j] += 1
                    if state[j] == IDLE:
                        state[j] = WAIT
                        t0 = arr if arr > pause_until[j] else pause_until[j]
                        v_ = evt_ver[j] + 1
                        evt_ver[j] = v_
                        evt_time[j] = t0
                        evt_kind[j] = START
                        _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, t0, START, j, v_)
                if blocked:
                    break
                pend_k[i] = kk + 1
                pend_rem[i] = -1
            if blocked:
                continue
            blocked_on[i] = -1
            state[i] = IDLE
            do_start = True

        if do_start:
            # the instance has nothing in hand: start its head tuple, or wait for it / the restart
            pu = pause_until[i]
            if ring_cnt[i] == 0:
                state[i] = IDLE
                c_new = C_IDLE
                if now < pu:
                    c_new = C_NONE
                    state[i] = WAIT
                    v_ = evt_ver[i] + 1
                    evt_ver[i] = v_
                    evt_time[i] = pu
                    evt_kind[i] = START
                    _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, pu, START, i, v_)
                if cat[i] != c_new:
                    acc_time[i, cat[i]] += now - cat_since[i]
                    cat[i] = c_new
                    cat_since[i] = now
                continue
            head = ring_off[i] + ring_head[i]
            t0 = ring_arr[head]
            if pu > t0:
                t0 = pu
            if t0 > now:
                state[i] = WAIT
                c_new = C_NONE if now < pu else C_IDLE
                if cat[i] != c_new:
                    acc_time[i, cat[i]] += now - cat_since[i]
                    cat[i] = c_new
                    cat_since[i] = now
                v_ = evt_ver[i] + 1
                evt_ver[i] = v_
                evt_time[i] = t0
                evt_kind[i] = START
                _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, t0, START, i, v_)
                continue
            q_area[i] += ring_cnt[i] * (now - q_since[i])
            q_since[i] = now
            cur_birth[i] = ring_birth[head]
            cur_arr[i] = ring_arr[head]
            cur_kg[i] = ring_kg[head]
            h = ring_head[i] + 1
            if h >= ring_cap[i]:
                h = 0
            ring_head[i] = h
            ring_cnt[i] -= 1
            op = inst_op[i]
            mean = op_svc_ms[op]
            svc = 0.0
            if mean > 0.0:
                sp = svc_pos[op]
                svc = svc_pool[op, sp] * mean * slow[i]
                sp += 1
                if sp >= PS - 4096:
                    m[M_LOW] = 1
                    if sp >= PS:
                        sp = 0
                svc_pos[op] = sp
            state[i] = BUSY
            if cat[i] != C_BUSY:
                acc_time[i, cat[i]] += now - cat_since[i]
                cat[i] = C_BUSY
                cat_since[i] = now
            svc_t0[i] = now
            svc_len[i] = svc
            v_ = evt_ver[i] + 1
            evt_ver[i] = v_
            cs = op_cpu[op]
            if cores > 0.0 and svc > 0.0 and cs > 0.0:
                # shared cores: enter the CPU phase (advance the virtual clock at the old speed)
                work = cs * svc
                wait_ms[i] = svc - work
                nc = m[M_NCPU]
                spd = 1.0 if nc <= cores else cores / nc
                vnow = mf[F_V] + (now - mf[F_VT]) * spd
                mf[F_V] = vnow
                mf[F_VT] = now
                tag = vnow + work
                cpu_tag[i] = tag
                cpu_on[i] = 1
                _cpush(c_v, c_seq, c_id, m, tag, i)
                nc += 1
                spd2 = 1.0 if nc <= cores else cores / nc
                evt_time[i] = now + work / spd2  # an estimate: the speed may change
                evt_kind[i] = CPU
                if spd2 != spd or c_id[0] == i:  # otherwise the pending CPU event still holds
                    _cpu_event(h_t, h_seq, h_kind, h_id, h_ver, m, c_v, c_id, now, vnow, spd2)
            else:
                evt_time[i] = now + svc
                evt_kind[i] = COMPLETE
                _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, now + svc, COMPLETE, i, v_)
            w = wait_head[i]
            if w >= 0:  # a slot freed: wake the first upstream instance blocked on this one
                nxt = wait_next[w]
                wait_head[i] = nxt
                if nxt < 0:
                    wait_tail[i] = -1
                in_wait[w] = 0
                v_ = evt_ver[w] + 1
                evt_ver[w] = v_
                evt_time[w] = now
                evt_kind[w] = WAKE
                _hpush(h_t, h_seq, h_kind, h_id, h_ver, m, now, WAKE, w, v_)

    # close the segment: accounting up to t_end
    n = inst_op.shape[0]
    for i in range(n):
        acc_time[i, cat[i]] += t_end - cat_since[i]
        cat_since[i] = t_end
        q_area[i] += ring_cnt[i] * (t_end - q_since[i])
        q_since[i] = t_end
    mf[F_NOW] = t_end
    return DONE


@njit(cache=True)
def route(s, i, e):
    """Target instance (global index) and key group of the next tuple on edge e (slow path).

    Returns -2 for broadcast and -3 for round-robin (the caller knows the copy / rr counters).
    """
    kind = s.e_kind[e]
    dop = s.e_dst[e]
    p = s.op_par[dop]
    base = s.op_first[dop]
    if kind == G_KEY:
        maxp = s.op_maxp[dop]
        u = udraw(s)
        hot = s.e_hot_frac[e]
        if hot > 0.0 and u < hot:
            kg = s.e_hot_kg[e]
        else:
            if hot > 0.0:
                u = (u - hot) / (1.0 - hot)
            a = s.e_key_ptr[e]
            nk = s.e_nkeys[e]
            if s.e_key_uniform[e]:
                idx = int(u * nk)
            else:
                idx = np.searchsorted(s.key_cdf[a:a + nk], u, side="right")
            if idx >= nk:
                idx = nk - 1
            kg = s.key_kg[a + idx]
        return base + (kg * p) // maxp, kg
    if kind == G_FORWARD:
        return base + s.inst_local[i], -1
    if kind == G_BROADCAST:
        return -2, -1
    if s.e_random[e]:
        j = int(udraw(s) * p)
        if j >= p:
            j = p - 1
        return base + j, -1
    return -3, -1


@njit(cache=True)
def force_deliver(s, i, now):
    """Restarts: write every pending output of blocked instance i to the spill buffer, ignoring
    credits; the driver moves them into the restored queues. Returns False when the spill buffer
    filled up first (the driver empties it and calls again)."""
    if s.in_wait[i]:
        # unlink from the wait list of the instance it is blocked on
        j = s.blocked_on[i]
        prev = -1
        w = s.wait_head[j]
        while w >= 0 and w != i:
            prev = w
            w = s.wait_next[w]
        if w == i:
            if prev < 0:
                s.wait_head[j] = s.wait_next[i]
            else:
                s.wait_next[prev] = s.wait_next[i]
            if s.wait_tail[j] == i:
                s.wait_tail[j] = prev
        s.in_wait[i] = 0
    op = s.inst_op[i]
    a = s.op_out_ptr[op]
    b = s.op_out_ptr[op + 1]
    birth = s.cur_birth[i]
    while s.pend_k[i] < b - a:
        k = s.pend_k[i]
        e = s.op_out_edge[a + k]
        dop = s.e_dst[e]
        p = s.op_par[dop]
        if s.pend_rem[i] < 0:
            cnt = sel_draw(s, e)
            if s.e_kind[e] == G_BROADCAST:
                cnt *= p
            s.pend_rem[i] = cnt
            s.pend_tot[i] = cnt
            s.pend_tgt[i] = -1
        while s.pend_rem[i] > 0:
            j = s.pend_tgt[i]
            if j < 0:
                j, kg = route(s, i, e)
                if j == -2:  # broadcast: copy index cycles over the instances
                    j = s.op_first[dop] + (s.pend_tot[i] - s.pend_rem[i]) % p
                elif j == -3:  # round-robin per upstream instance and edge
                    r = s.rr[i, k]
                    j = s.op_first[dop] + r
                    r += 1
                    if r >= p:
                        r = 0
                    s.rr[i, k] = r
                s.pend_tgt[i] = j
                s.pend_kg[i] = kg
            n = s.m[M_SPILL]
            if n >= s.spill_j.shape[0]:
                return False
            s.spill_j[n] = j
            s.spill_birth[n] = birth
            s.spill_kg[n] = s.pend_kg[i]
            s.m[M_SPILL] = n + 1
            s.pend_tgt[i] = -1
            s.pend_rem[i] -= 1
            s.rec_out[i, k] += 1
        s.pend_k[i] = k + 1
        s.pend_rem[i] = -1
    s.blocked_on[i] = -1
    s.state[i] = IDLE
    return True


@njit(cache=True)
def flush_all(s, now):
    """Ship every non-empty output buffer now (before a restart)."""
    for c in range(s.chan_n.shape[0]):
        if s.chan_n[c] > 0:
            _ship(s, c, now)
