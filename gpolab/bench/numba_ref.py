"""A numba implementation of workload W1: a compiled peer of the engine in ``gpolab bench``.

The same statistic as :mod:`gpolab.bench.numpy_ref` and ``gpolab.kernels.grouped.bandit_error``
with ``BanditCell(("loo",), G, mean_error=False)``: per seed, every prompt x gets G responses,
each one (action, reward) pair drawn with one uniform over the 2A joint outcomes by the alias
method (the engine's sampler; tables built once on the host) or, as the peer drew before the
engine took it, by a binary-search inverse CDF; leave-one-out advantages; the per-seed
error Σ_x f(x) ‖ĝ_x − g_x‖² with ĝ_x = Σ_g (A_g / G)(e_{a_g} − π_x).  Written as a numba user
would: ``@njit(parallel=True)`` with ``prange`` over blocks of seeds (one scratch buffer per
block), float64 arithmetic.

Random numbers: numba's ``np.random`` has one stream per thread, so a ``prange`` loop draws
different numbers under different thread schedules.  Each seed therefore has its own SplitMix64
stream (Steele, Lea & Flood 2014; the constants of Vigna's splitmix64.c), started from a hash of
(seed, seed index): results do not depend on the thread count or the block size.  This stream
choice is gpolab's; the numbers differ from the engine's and numpy's, the statistic's law does not.

numba is optional (``pip install "gpolab[bench]"``); :func:`missing` says why it cannot run.
"""

from __future__ import annotations

import functools

import numpy as np

from gpolab.bench import numpy_ref

BLOCK = 64  # seeds per prange iteration (one scratch buffer each)


def missing() -> str | None:
    """None when numba imports, else a one-line reason."""
    try:
        import numba  # noqa: F401
    except ImportError as err:
        return f"numba is not installed ({err.msg}); pip install 'gpolab[bench]'"
    return None


DRAWS = ("alias", "binary")  # the engine's sampler; the binary-search peer before issue 44


@functools.cache
def _kernel(draw: str = "alias"):
    """The compiled kernel with the alias draw or a binary-search inverse CDF (the peer's draw
    before the engine took the alias method), built on first use: importing this module never
    needs numba."""
    import numba

    gamma = np.uint64(0x9E3779B97F4A7C15)
    m1, m2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    s30, s27, s31, s11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
    scale = 1.0 / 9007199254740992.0  # 2^-53

    @numba.njit(inline="always")
    def mix(z):
        z = (z ^ (z >> s30)) * m1
        z = (z ^ (z >> s27)) * m2
        return z ^ (z >> s31)

    @numba.njit(inline="always")
    def alias_draw(keep, alias, cdf, x, u):
        C = keep.shape[1]
        i = min(int(u * C), C - 1)  # a column, kept or replaced by its alias
        return i if u * C - i < keep[x, i] else alias[x, i]

    @numba.njit(inline="always")
    def binary_draw(keep, alias, cdf, x, u):
        C = cdf.shape[1]
        u = u * cdf[x, C - 1]
        lo, hi = 0, C  # number of CDF entries <= u (searchsorted, "right")
        while lo < hi:
            mid = (lo + hi) >> 1
            if cdf[x, mid] <= u:
                lo = mid + 1
            else:
                hi = mid
        return min(lo, C - 1)

    pick = alias_draw if draw == "alias" else binary_draw

    @numba.njit(parallel=True)
    def w1_errors(seed, keep, alias, cdf, pi, g_local, prompt_probs, G, n_seeds):
        P, A = pi.shape
        out = np.empty(n_seeds)
        for blk in numba.prange((n_seeds + BLOCK - 1) // BLOCK):
            actions = np.empty(G, np.int64)
            z = np.empty(G)
            ghat = np.empty(A)
            for s in range(blk * BLOCK, min(n_seeds, (blk + 1) * BLOCK)):
                state = mix(np.uint64(seed) * gamma + np.uint64(s))  # this seed's stream
                err = 0.0
                for x in range(P):
                    total = 0.0
                    for g in range(G):
                        state += gamma
                        o = pick(keep, alias, cdf, x, (mix(state) >> s11) * scale)
                        actions[g], z[g] = o >> 1, o & 1
                        total += z[g]
                    c_sum = 0.0
                    for a in range(A):
                        ghat[a] = 0.0
                    for g in range(G):
                        c = (z[g] - (total - z[g]) / (G - 1)) / G  # leave-one-out, over G
                        ghat[actions[g]] += c
                        c_sum += c
                    e = 0.0
                    for a in range(A):
                        d = ghat[a] - c_sum * pi[x, a] - g_local[x, a]
                        e += d * d
                    err += prompt_probs[x] * e
                out[s] = err
        return out

    return w1_errors


def w1_errors(seed: int, w1: numpy_ref.W1, n_seeds: int, draw: str = "alias") -> np.ndarray:
    """Per-seed squared errors (n_seeds,) of the loo estimator on ``w1``
    (:class:`gpolab.bench.numpy_ref.W1`); ``draw``: ``alias`` (the engine's sampler) or
    ``binary`` (a binary-search inverse CDF)."""
    pi, success, g_local, prompt_probs, G = w1
    if G < 2 or pi.shape != success.shape or pi.shape != g_local.shape:
        raise ValueError(f"need G >= 2 and equal (P, A) shapes; got G={G}, {pi.shape}")
    f64 = lambda a: np.ascontiguousarray(a, np.float64)  # noqa: E731
    if draw not in DRAWS:
        raise ValueError(f"draw: got {draw!r}; allowed: {', '.join(DRAWS)}")
    keep, alias = numpy_ref.joint_tables(f64(pi), f64(success))
    alias = np.ascontiguousarray(alias, np.int64)
    cdf = np.cumsum(numpy_ref.joint_probs(f64(pi), f64(success)), -1)
    kernel = _kernel(draw)
    return kernel(seed, keep, alias, cdf, f64(pi), f64(g_local), f64(prompt_probs), G, n_seeds)


def w1_mse(seed: int, w1: numpy_ref.W1, n_seeds: int, draw="alias"):
    """(mse, standard error) over ``n_seeds`` seeds."""
    errs = w1_errors(seed, w1, n_seeds, draw)
    return float(errs.mean()), float(errs.std(ddof=1) / np.sqrt(n_seeds))
