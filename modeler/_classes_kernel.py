"""The key-grouped operators' sojourn transform, summed over instance classes, as one compiled loop.

``modeler.queueing._OpDist`` evaluates, at every Laplace point s of a tail's numerical inversion,

    sum over the (row, class) pairs of a row:  w * (1 - rho + rho / (1 + s W)) * C(x; m)

with x = s E[S] and C the in-clump wait's transform (``queueing._clump_transform``):
C = (1 - a) u(N) + a u(N + 1), N = floor(m), a = m - N, u(N) = expm1(-N x) / (N expm1(-x)).
A key-grouped operator has one class per instance, so this is O(parallelism) per row and point
where an unkeyed operator's is O(1); in numpy every step of it is a pass over a [pairs, points]
complex temporary, which made a key-grouped what-if ~20x slower than an unkeyed one of the same
size. This loop fuses the steps (no temporaries) and computes u(N) once per row, point and
distinct N of the row (a row's classes share a handful of clump sizes). Same formulas as the
numpy path, including numpy's complex expm1 (so results agree to rounding, ~1e-15 relative);
``queueing._OpDist._classes_transform_numpy`` is the reference and the fallback without numba.

numba is imported and the loop compiled (cached on disk) on first use only: importing
``modeler.queueing`` stays cheap for the commands that never compute a key-grouped tail.
"""

from __future__ import annotations

import math

import numpy as np

from modeler._jit import HAVE_NUMBA, njit  # noqa: F401 (HAVE_NUMBA: read by callers)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _expm1(z: complex) -> complex:
    """numpy's complex expm1 (``nc_expm1``): accurate for small |z|."""
    h = math.sin(z.imag / 2.0)
    return complex(math.expm1(z.real) * math.cos(z.imag) - 2.0 * h * h, math.exp(z.real) * math.sin(z.imag))


#: Clump sizes up to this are averaged term by term (u(N) = mean of exp(-k x), k < N; exact,
#: N complex multiplications); larger ones by the closed form with expm1.
_DIRECT_N = 64


@njit(cache=True, nogil=True, error_model="numpy")
def classes_sum(s, x, pair_start, w, rho, wait, m):  # pragma: no cover - compiled
    """[n, S] complex: per row i and point j, the sum over the pairs pair_start[i] ..
    pair_start[i + 1] - 1 of w * (1 - rho + rho / (1 + s W)) * C(x; m) (C = 1 where m <= 1).

    Per row, when its clump sizes N = floor(m) (and N + 1) are at most ``_DIRECT_N``: u(k) at
    every point for k from the row's smallest N to its largest N + 1, by one running sum; then
    per pair a loop over the points, in real arithmetic. Larger sizes: u(N) and u(N + 1) per
    pair from the closed form."""
    n, S = s.shape
    out = np.zeros((n, S), dtype=np.complex128)
    u_re = np.empty((_DIRECT_N + 2, S))
    u_im = np.empty((_DIRECT_N + 2, S))
    d = np.empty(S, dtype=np.complex128)
    sr = np.empty(S)
    si = np.empty(S)
    acc_re = np.empty(S)
    acc_im = np.empty(S)
    for i in range(n):
        p0, p1 = pair_start[i], pair_start[i + 1]
        if p0 == p1:
            continue
        lo = np.inf
        hi = 0.0
        for p in range(p0, p1):
            if m[p] > 1.0:
                n1 = math.floor(m[p])
                lo = min(lo, n1)
                hi = max(hi, n1 + 1.0)
        direct = hi <= _DIRECT_N
        for j in range(S):
            sr[j] = s[i, j].real
            si[j] = s[i, j].imag
            acc_re[j] = 0.0
            acc_im[j] = 0.0
        if hi > 0.0:
            first = int(lo)
            top = int(hi)
            for j in range(S):
                xj = x[i, j]
                if direct:
                    # u(k) = (1/k) sum_{l<k} E^l, E = exp(-x): a running sum, kept from k = lo
                    mag = math.exp(-xj.real)
                    e = complex(mag * math.cos(xj.imag), -mag * math.sin(xj.imag))
                    power = 1.0 + 0j
                    total = 0j
                    for k in range(1, top + 1):
                        total += power
                        if k >= first:
                            u_re[k - first, j] = total.real / k
                            u_im[k - first, j] = total.imag / k
                        power = power * e
                else:
                    d[j] = _expm1(-xj)
        for p in range(p0, p1):
            r = rho[p]
            wt = wait[p]
            wp = w[p]
            mp = m[p]
            if mp > 1.0:
                n1 = math.floor(mp)
                ap = mp - n1
                bp = 1.0 - ap
                if direct:
                    q = int(n1) - first
                    for j in range(S):
                        # 1 - rho + rho / (1 + s W) in real arithmetic (rho / z = rho conj(z) / |z|^2)
                        zr = 1.0 + sr[j] * wt
                        zi = si[j] * wt
                        f = r / (zr * zr + zi * zi)
                        t_re = 1.0 - r + f * zr
                        t_im = -f * zi
                        c_re = bp * u_re[q, j] + ap * u_re[q + 1, j]
                        c_im = bp * u_im[q, j] + ap * u_im[q + 1, j]
                        acc_re[j] += wp * (t_re * c_re - t_im * c_im)
                        acc_im[j] += wp * (t_re * c_im + t_im * c_re)
                else:
                    for j in range(S):
                        zr = 1.0 + sr[j] * wt
                        zi = si[j] * wt
                        f = r / (zr * zr + zi * zi)
                        t_re = 1.0 - r + f * zr
                        t_im = -f * zi
                        xj = x[i, j]
                        c = bp * _expm1(-n1 * xj) / (n1 * d[j]) + ap * _expm1(-(n1 + 1.0) * xj) / ((n1 + 1.0) * d[j])
                        acc_re[j] += wp * (t_re * c.real - t_im * c.imag)
                        acc_im[j] += wp * (t_re * c.imag + t_im * c.real)
            else:
                for j in range(S):
                    zr = 1.0 + sr[j] * wt
                    zi = si[j] * wt
                    f = r / (zr * zr + zi * zi)
                    acc_re[j] += wp * (1.0 - r + f * zr)
                    acc_im[j] += wp * (-f * zi)
        for j in range(S):
            out[i, j] = complex(acc_re[j], acc_im[j])
    return out
