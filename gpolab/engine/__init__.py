"""The Monte Carlo engine: ``jit(vmap(per_seed))`` over fixed-size chunks of seeds.

A *per-seed function* ``fn(cell, key, args) -> dict of arrays`` computes everything one seed
contributes.  ``cell`` is a hashable frozen dataclass of static settings (G, K, M, estimator, ...:
anything that sets a shape or a code path); ``args`` is a pytree of traced data (env params,
exact truth, eps, ...), so sweeping continuous knobs never recompiles.

* Seed ``i`` always uses ``jax.random.fold_in(key, i)``: its draws are the same bits whatever the
  chunk size, the number of chunks or the device count.
* Seeds run in chunks of ``chunk``; the last chunk is padded and its padding masked out, so one
  compilation per (fn, cell, chunk, shapes) serves every seed count.  By default the chunk is
  sized from XLA's memory analysis so its temporaries stay in the CPU's last-level cache
  (:func:`auto_chunk`); a shorter run takes the power of two at or above its seed count (no idle
  seeds: the mismatch lab's 512-prompt rows ran 2 seeds in chunks of 8).  One executable call
  loops over up to 64 chunks (:func:`sub_chunks`), skipping those past the last seed.
* Per chunk, each output leaf is reduced to its sum (and per-seed scalars to their sum of
  squares) on device; chunks are combined on the host in float64.  Memory is bounded by the
  chunk, not by the seed count.
* The seed axis can be sharded over devices and processes (:func:`seed_mesh`); results do not
  depend on it beyond float rounding of the sums.  The device set-up (meshes, CPU devices,
  ``jax.distributed``) lives in :mod:`gpolab.engine.devices`; its names are importable from here.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
import json
import math
import os
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from gpolab import spans, validate
from gpolab.engine.devices import (  # noqa: F401  (the engine's public names)
    CACHE_PER_CORE,
    CLUSTERS,
    _shard,
    cache_bytes,
    detect_cluster,
    float64_mode,
    full_precision,
    init_auto_distributed,
    init_distributed,
    local_mesh,
    reported_cache_bytes,
    seed_mesh,
    usable_cores,
    use_cpu_devices,
)
from gpolab.engine.progress import Clock

Z95 = 1.959963984540054
TRACES: collections.Counter = collections.Counter()  # (fn name, cell) -> times traced
AUTO = 0  # chunk=AUTO: seeds per chunk from auto_chunk
LOCAL = "local"  # mesh=LOCAL: every device of this process (local_mesh)
FIXED_CHUNK = 4096  # the chunk of multi-process runs, which must agree on it without a probe
PROBE = 1024  # seeds of the (unoptimised, thrown away) compilation auto_chunk measures
CALL_SEEDS = 16384  # seeds per executable call, looped over in sub-chunks of ``chunk``


def cell_key(key: jax.Array, *identity) -> jax.Array:
    """The key stream of one cell: ``fold_in(key, h)`` with h a stable 31-bit hash of the cell's
    ``identity`` (e.g. ``("tree", K, M)``), so different cells draw independently while a cell
    draws the same numbers whatever grid it sits in.  Cells that should share draws (common
    random numbers, e.g. the estimators of one G) share an identity."""
    text = json.dumps([str(x) for x in identity])
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF
    return jax.random.fold_in(key, h)


def seed_keys(key: jax.Array, indices: jax.Array) -> jax.Array:
    """Per-seed keys ``fold_in(key, i)``; independent of how seeds are grouped."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, indices)


def prng_mode():
    """The PRNG setting every engine computation runs under.

    Keys are threefry2x32 in its non-partitionable form: per-seed keys already make the seed axis
    embarrassingly parallel, and on CPU this form compiles ~6× faster and draws ~1.8× faster
    than the partitionable one (measured by ``gpolab bench``'s PRNG probe).
    """
    return jax.threefry_partitionable(False)


def per_seed(fn: Callable, cell, key: jax.Array, args, indices, mesh=None):
    """Raw per-seed outputs for the given seed indices (diagnostics, histograms, tests).

    With ``mesh``, the indices (length a multiple of the device count) are sharded over it.
    """
    if mesh is not None:
        indices = _shard(np.asarray(indices, dtype=np.uint32), mesh)
    with prng_mode(), spans.span("monte carlo"):
        return jax.block_until_ready(_per_seed(fn, cell, key, args, indices))


@partial(jax.jit, static_argnames=("fn", "cell"))
def _per_seed(fn: Callable, cell, key: jax.Array, args, indices: jax.Array):
    return jax.vmap(fn, in_axes=(None, 0, None))(cell, seed_keys(key, indices), args)


@partial(jax.jit, static_argnames=("fn", "cell", "parts"))
def _chunk_moments(
    fn: Callable,
    cell,
    key: jax.Array,
    args,
    idx: jax.Array,
    valid: jax.Array,
    active: jax.Array,
    parts: int = 1,
):
    """Sums (and, for per-seed scalars, sums of squares) over the seeds ``idx`` (S, chunk): a
    loop over S sub-chunks inside one executable, one (S, parts, ...) partial sum per sub-chunk
    and part (contiguous slices of the sub-chunk); sub-chunks with ``active[s]`` false are
    skipped.  Only one sub-chunk's temporaries are live at a time, and one call serves S of
    them: XLA:CPU spends ~0.2 ms plus the page faults of fresh temporaries per execution, which
    the loop pays once (see :data:`CALL_SEEDS`).  With the sub-chunk's seed axis sharded over
    ``parts`` devices each device reduces its own slice: no collective, so no device thread ever
    waits for another (XLA:CPU's in-process all-reduce can deadlock when devices outnumber idle
    cores); the host adds everything in float64.

    Per-seed scalars come back per sub-chunk, (S, parts, k).  Every other output (error vectors,
    gradients: a vector of 10⁴–10⁶ numbers per sub-chunk) is summed over the sub-chunks inside
    the loop, with Kahan's compensation (float32 rounding of the sum stays at one unit whatever
    S), and comes back as (1, parts, m): stacking S copies cost a 2-million-number output
    (offpolicy_tokens) half a GiB per call and seconds of host conversion."""
    TRACES[(getattr(fn, "__name__", str(fn)), cell)] += 1
    sub = partial(_sub_chunk, fn, cell, key, args, parts=parts)
    zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(sub, idx[0], valid[0]))  # cached trace
    carried = {g: v[0] for g, v in zeros.items() if g[1] == "arrays"}

    def body(acc, xs):
        i, ok, on = xs
        out = jax.lax.cond(on, sub, lambda *_: zeros, i, ok)
        acc = {g: _kahan_add(*acc[g], out[g][0]) for g in acc}
        return acc, {g: v for g, v in out.items() if g not in acc}

    init = {g: (z, z) for g, z in carried.items()}
    acc, stacked = jax.lax.scan(body, init, (idx, valid, active))
    return stacked | {g: (s[None], None) for g, (s, _) in acc.items()}


def _kahan_add(total: jax.Array, lost: jax.Array, x: jax.Array):
    """One step of Kahan's compensated sum: (total + x, the low bits the addition dropped)."""
    y = x - lost
    t = total + y
    return t, (t - total) - y


@partial(jax.jit, static_argnames=("fn", "cell", "parts"))
def _sub_chunk(fn: Callable, cell, key: jax.Array, args, idx: jax.Array, ok: jax.Array, parts: int):
    """One sub-chunk of :func:`_chunk_moments`: its (parts, ...) sums over the valid seeds.

    The outputs are packed before they are reduced (:func:`_pack`): per dtype, every per-seed
    scalar in one (seeds, k) array (sums and sums of squares) and every other output flattened
    into one (seeds, m) array (sums): two reductions per dtype instead of one or two per output
    (a five-estimator bandit cell has 26 outputs), a smaller program that compiles and runs
    faster.  :func:`run` unpacks the sums on the host."""
    out = jax.vmap(fn, in_axes=(None, 0, None))(cell, seed_keys(key, idx), args)
    _LAYOUTS.setdefault((fn, cell, *_shapes(args)), _groups(out, 1))  # :func:`_layout`'s, free

    def moments(x, scalars):
        x = jnp.where(ok[:, None], x, 0).reshape((parts, -1) + x.shape[1:])
        return jnp.sum(x, axis=1), (jnp.sum(x * x, axis=1) if scalars else None)

    return {
        group: moments(jnp.concatenate(xs, axis=1), group[1] == "scalars")
        for group, xs in _pack(out, idx.shape[0]).items()
    }


def _group(dtype, per_seed_shape: tuple) -> tuple:
    """The packed array an output of one seed goes to: (dtype, "scalars" | "arrays")."""
    return str(dtype), "scalars" if per_seed_shape == () else "arrays"


def _pack(out: dict, seeds: int) -> dict:
    """Per-seed outputs {path: (seeds, *shape)} → {:func:`_group`: [(seeds, n)]}, in
    :func:`_flatten`'s order (the order :func:`_layout` reads back)."""
    groups: dict = {}
    for _, x in _flatten(out):
        flat = x.reshape(seeds, math.prod(x.shape[1:]))
        groups.setdefault(_group(x.dtype, x.shape[1:]), []).append(flat)
    return groups


_LAYOUTS: dict = {}


def _shapes(args) -> tuple:
    """A hashable key of the arguments' structure, shapes and dtypes as JAX traces them (a Python
    float is float32): the same key from the arguments and from their tracers in a trace."""
    leaves, tree = jax.tree.flatten(args)
    return str(tree), tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves)


def _groups(out: dict, lead: int) -> dict:
    """{(dtype, kind): [(path, shape, width)]} of outputs whose first ``lead`` axes are seeds."""
    groups: dict = {}
    for path, x in _flatten(out):
        shape = x.shape[lead:]
        groups.setdefault(_group(x.dtype, shape), []).append((path, shape, math.prod(shape)))
    return groups


def _layout(fn: Callable, cell, key: jax.Array, args) -> dict:
    """Where each output sits in the packed sums of :func:`_sub_chunk` (:func:`_groups`): kept
    when :func:`_sub_chunk` traces ``fn``, else one trace of ``fn`` here (a jit cache hit after
    :func:`forget_chunks`)."""
    memo = (fn, cell, *_shapes(args))
    if memo not in _LAYOUTS:
        with prng_mode():
            _LAYOUTS[memo] = _groups(jax.eval_shape(lambda k: fn(cell, k, args), key), 0)
    return _LAYOUTS[memo]


def chunk_inputs(start: int, n_seeds: int, chunk: int, per_call: int):
    """Host arrays for one :func:`_chunk_moments` call from seed ``start``: indices and
    validity (per_call, chunk) and the per-sub-chunk ``active`` flags (per_call,)."""
    idx = np.arange(start, start + per_call * chunk, dtype=np.uint32).reshape(per_call, chunk)
    return idx, idx < n_seeds, idx[:, 0] < n_seeds


def sub_chunks(chunk: int) -> int:
    """Sub-chunks per executable call: :data:`CALL_SEEDS` seeds, between 1 and 64 sub-chunks.
    Depends on the chunk only, so it never recompiles when the seed count changes."""
    return max(1, min(64, CALL_SEEDS // chunk))


@dataclasses.dataclass(frozen=True)
class Moments:
    """Sums (float64) of every per-seed output over ``n`` seeds, and sums of squares of the
    per-seed scalars (enough for their variance and standard error; vector outputs such as error
    vectors only need their mean).  Nested outputs are keyed by their path, e.g. ``"loo/sq"``.
    """

    n: int
    sums: dict
    sumsq: dict

    def mean(self, name: str) -> np.ndarray:
        return self.sums[name] / self.n

    def var(self, name: str) -> float:
        """Unbiased (ddof 1) variance across seeds of a per-seed scalar."""
        if name not in self.sumsq:
            raise KeyError(f"{name!r} is not a per-seed scalar; only its mean is accumulated")
        n = self.n
        if n < 2:
            return math.nan
        return max(float(self.sumsq[name] - self.sums[name] ** 2 / n), 0.0) / (n - 1)

    def se(self, name: str) -> float:
        """Standard error of :meth:`mean` of a per-seed scalar."""
        return math.sqrt(self.var(name) / self.n)


_AUTO_CHUNKS: dict = {}


@cache
def _source_digest() -> str:
    """Hash of the engine code a stored chunk choice rests on (the chunk function, its packing,
    the choice): an edit elsewhere keeps the choices.  A choice sets speed only; every run's
    executable is checked by :func:`check_memory`."""
    code = (_chunk_moments, _sub_chunk, _pack, sub_chunks, _fit, _bytes_per_seed, _compile_at)
    text = "".join(inspect.getsource(f) for f in code) + repr((CALL_SEEDS, PROBE))
    return hashlib.sha256(text.encode()).hexdigest()


def _chunk_file() -> Path | None:
    """Where :func:`auto_chunk` keeps its choices across processes: next to JAX's persistent
    compilation cache when one is configured (the CLI's ``GPOLAB_CACHE_DIR``), else nowhere."""
    folder = jax.config.jax_compilation_cache_dir
    if not folder or not jax.config.jax_enable_compilation_cache:
        return None
    return Path(folder) / "gpolab-auto-chunk.json"


def _stored_chunks(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _store_chunk(path: Path, key: str, chunk: int) -> None:
    """Add one choice to the file (atomic replace; a lost race only costs a probe later)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**_stored_chunks(path), key: chunk}))
        tmp.replace(path)
    except OSError:
        pass


def _fit(per_seed: float, cpu: bool) -> int:
    """The largest power of two of seeds whose temporaries (``per_seed`` bytes each) fit in half
    the last-level cache on CPU (8…8192 seeds), or in 2 GiB on an accelerator (at most 65536)."""
    budget, top = (0.5 * cache_bytes(), 8192) if cpu else (float(1 << 31), 65536)
    fit = int(budget // max(per_seed, 1.0))
    return min(top, max(8, 1 << (fit.bit_length() - 1) if fit else 8))


_GUESS: dict = {}  # (fn, argument shapes, cpu) -> temporary bytes per seed last measured


def forget_chunks() -> None:
    """Drop every chunk choice, guess and output layout held in this process (as a new process
    starts)."""
    _AUTO_CHUNKS.clear()
    _GUESS.clear()
    _LAYOUTS.clear()
    _MEMORY.clear()


def _call_inputs(chunk: int, mesh) -> tuple:
    """(idx, valid, active) of one executable call at ``chunk`` seeds per sub-chunk, sharded over
    ``mesh`` (None: one device): the arguments :func:`run` passes."""
    idx, valid, active = chunk_inputs(0, chunk * sub_chunks(chunk), chunk, sub_chunks(chunk))
    if mesh is not None:
        idx, valid = _shard(idx, mesh), _shard(valid, mesh)
    return idx, valid, active


def _compile_at(fn: Callable, cell, key, args, chunk: int, mesh) -> float:
    """Compile the executable :func:`run` calls at ``chunk`` on ``mesh`` (into the jit cache, so
    the run reuses it) and return its temporary bytes per seed from XLA's memory analysis (per
    device: each device holds ``chunk / devices`` seeds of a sub-chunk at a time)."""
    parts = 1 if mesh is None else mesh.size
    with prng_mode():
        lowered = _chunk_moments.lower(fn, cell, key, args, *_call_inputs(chunk, mesh), parts)
        analysis = lowered.compile().memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", 0) / (chunk / parts)


def auto_chunk(fn: Callable, cell, key: jax.Array, args, mesh=None) -> int:
    """Seeds per chunk for ``fn`` on ``cell`` and arguments of these shapes, run on ``mesh``
    (None: one device; pass :func:`run`'s mesh, whose executable this may compile).

    The chunk is the largest power of two whose temporaries fit in half the last-level cache on
    CPU (between 8 and 8192 seeds), or in 2 GiB on an accelerator (at most 65536), from XLA's
    memory analysis (temporary bytes per seed).  Larger CPU chunks spill to memory: on a 2-core
    CPU with 32 MiB of L3, W1 runs 1.7× and a five-estimator bandit cell 2.2× faster at the
    chosen chunk than at 4096 (``gpolab bench`` reports each workload's chunk).

    Where to read the bytes per seed, cheapest first:

    * a choice already made for this cell and shapes (in this process, or, where JAX's
      persistent compilation cache is on, on this machine by this engine's chunk code:
      :func:`_source_digest`; kept in ``gpolab-auto-chunk.json`` in that cache folder);
    * the executable itself: when an earlier cell of ``fn`` with arguments of these shapes was
      measured (a sweep's next G, say), its bytes per seed give a first chunk; the executable
      :func:`run` will call is compiled at that chunk and its own memory analysis checked.  Only
      when it asks for another chunk is it compiled again (temporaries per seed of one ``fn``
      differ little between cells: a bandit cell's are the same at every G);
    * else a probe: the chunk function compiled for :data:`PROBE` seeds without LLVM's
      optimisation (about half a full compilation), thrown away.

    Depends on shapes only, never on the seed count, and a chunk never changes results, only
    speed.  Multi-process runs use :data:`FIXED_CHUNK`, which every process agrees on.
    """
    if jax.process_count() > 1:
        return FIXED_CHUNK
    cpu = jax.default_backend() == "cpu"
    family = (fn, *_shapes(args), cpu)
    memo = (cell, *family)
    stored = _chunk_file()
    if memo in _AUTO_CHUNKS:
        return _AUTO_CHUNKS[memo]
    if stored is not None:
        fn_name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}"
        text = repr((fn_name, cell, *memo[2:], cache_bytes(), PROBE, jax.__version__))
        disk_key = hashlib.sha256((text + _source_digest()).encode()).hexdigest()
        if disk_key in (known := _stored_chunks(stored)):
            _AUTO_CHUNKS[memo] = int(known[disk_key])
            return _AUTO_CHUNKS[memo]
    _GUESS[family] = _bytes_per_seed(fn, cell, key, args, mesh, family)
    _AUTO_CHUNKS[memo] = _fit(_GUESS[family], cpu)
    if stored is not None:
        _store_chunk(stored, disk_key, _AUTO_CHUNKS[memo])
    return _AUTO_CHUNKS[memo]


def _bytes_per_seed(fn: Callable, cell, key: jax.Array, args, mesh, family: tuple) -> float:
    """:func:`auto_chunk`'s temporary bytes per seed: from the executable compiled at the guess
    an earlier cell of this ``family`` gave, else from a probe (buffers are set by XLA's HLO
    passes, so LLVM's optimisation is skipped)."""
    cpu = family[-1]
    if family in _GUESS:  # compile the real executable at the guess; check its own analysis
        parts = 1 if mesh is None else mesh.size
        guess = -(-_fit(_GUESS[family], cpu) // parts) * parts
        return _compile_at(fn, cell, key, args, guess, mesh)
    with prng_mode():
        inputs = chunk_inputs(0, PROBE, PROBE, 1)
        lowered = _chunk_moments.lower(fn, cell, key, args, *inputs)
    analysis = lowered.compile({"xla_backend_optimization_level": 0}).memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", 0) / PROBE


_MEMORY: dict = {}  # (fn, cell, shapes, chunk, devices) -> bytes one executable call needs


def memory_limit() -> int | None:
    """Bytes a run may use: the accelerator's memory limit, or the host's available memory on
    CPU (every CPU device shares it); None where unknown."""
    device = jax.local_devices()[0]
    if device.platform != "cpu":
        stats = getattr(device, "memory_stats", lambda: None)() or {}
        return stats.get("bytes_limit")
    return validate.available_bytes()


def check_memory(fn: Callable, cell, key: jax.Array, args, chunk: int, mesh) -> None:
    """Refuse, before any seed runs, a cell whose executable needs more memory than there is:
    XLA's memory analysis (temporaries, arguments, outputs) of the very executable :func:`run`
    calls (compiled here into the jit cache, so the run reuses it), times the CPU devices that
    share the host's memory.  One :class:`~gpolab.validate.ConfigError` with the estimate."""
    if jax.process_count() > 1:
        return
    parts = 1 if mesh is None else mesh.size
    memo = (fn, cell, *_shapes(args), chunk, parts)
    if memo not in _MEMORY:
        with prng_mode():
            lowered = _chunk_moments.lower(fn, cell, key, args, *_call_inputs(chunk, mesh), parts)
            a = lowered.compile().memory_analysis()
        each = sum(getattr(a, f"{k}_size_in_bytes", 0) or 0 for k in ("temp", "argument", "output"))
        cpu = jax.local_devices()[0].platform == "cpu"
        _MEMORY[memo] = each * (parts if cpu else 1)
    need, have = _MEMORY[memo], memory_limit()
    if have is not None and need > have:
        name = type(cell).__name__
        raise validate.ConfigError(
            f"memory: {name} {_cell_text(cell)} needs about {validate.gib(need)} ({chunk:,} seeds "
            f"per chunk, XLA's memory analysis); allowed: at most the {validate.gib(have)} "
            "available (smaller sizes)"
        )


def _cell_text(cell) -> str:
    if dataclasses.is_dataclass(cell):
        return ", ".join(f"{f.name}={getattr(cell, f.name)}" for f in dataclasses.fields(cell))
    return str(cell)


def run(
    fn: Callable,
    cell,
    args,
    key: jax.Array,
    n_seeds: int,
    chunk: int = AUTO,
    on_chunk: Callable[[int], None] | None = None,
    mesh: jax.sharding.Mesh | str | None = LOCAL,
) -> Moments:
    """Run ``fn`` over seeds 0..n_seeds−1 in chunks; returns float64 :class:`Moments`.

    ``chunk=AUTO`` (0, the default) takes :func:`_placed`'s chunk; results do not depend on it.

    ``mesh=LOCAL`` (the default) shards over this process's devices when it has several
    (:func:`local_mesh`; see :func:`use_cpu_devices`), ``None`` runs on one device.
    With a ``mesh`` (see :func:`seed_mesh`), each chunk's seed axis is sharded over the mesh's
    devices (``NamedSharding(mesh, P("seeds"))``; ``chunk`` is rounded up to a multiple of the
    device count); each device sums its own slice and the host adds the devices' partial sums,
    so no collective runs inside the chunk.  Per-seed draws are identical to the unsharded run;
    sums agree to float rounding.  Under ``jax.distributed`` every process
    calls :func:`run` with the same arguments and gets the same result.
    """
    validate.integer("seeds", n_seeds, 1)
    validate.integer("chunk", chunk, AUTO)
    mesh, chunk, n_parts = _placed(fn, cell, key, args, chunk, mesh, n_seeds)
    per_call = sub_chunks(chunk)
    check_memory(fn, cell, key, args, chunk, mesh)
    parts, clock, step = [], Clock(n_seeds), chunk * per_call
    timed = n_seeds > step and jax.process_count() == 1  # several calls: each timed (progress;
    # an endless cell refused; one process only: a refusal in one of many would hang the rest)
    start = 0
    with prng_mode(), spans.span("monte carlo"):
        while start < n_seeds:
            idx, valid, active = chunk_inputs(start, n_seeds, chunk, per_call)
            if timed and start == 0:  # the first call runs one sub-chunk: a quick, early rate
                active = active & (np.arange(per_call) == 0)
            if mesh is not None:
                idx, valid = _shard(idx, mesh), _shard(valid, mesh)
            parts.append(_chunk_moments(fn, cell, key, args, idx, valid, active, n_parts))
            done = min(start + chunk * int(active.sum()), n_seeds)
            if on_chunk is not None:
                on_chunk(done - start)
            start = done
            if timed:
                jax.block_until_ready(parts[-1])
                clock.tick(done)
        jax.block_until_ready(parts)  # the span holds the device's work, not just its dispatch
    return _combine(_layout(fn, cell, key, args), parts, n_seeds)


def _placed(fn: Callable, cell, key: jax.Array, args, chunk: int, mesh, n_seeds: int):
    """:func:`run`'s (mesh, chunk, devices): ``LOCAL`` is :func:`local_mesh`; ``AUTO`` is
    :func:`auto_chunk`, at most the power of two ≥ ``n_seeds``; rounded up to the devices."""
    if isinstance(mesh, str):
        validate.choice("mesh", mesh, (LOCAL,))
        mesh = local_mesh()
    chunk = chunk or min(auto_chunk(fn, cell, key, args, mesh), 1 << (n_seeds - 1).bit_length())
    n_parts = 1 if mesh is None else mesh.size
    return mesh, -(-chunk // n_parts) * n_parts, n_parts


def _combine(layout: dict, parts: list, n_seeds: int) -> Moments:
    """The chunks' packed sums (and sums of squares of per-seed scalars) added on the host in
    float64 and unpacked into one array per output path (``layout``: :func:`_layout`)."""
    sums, sumsq = {}, {}
    for group, items in layout.items():
        total = sum(_host(p[group][0]) for p in parts)
        total_sq = sum(_host(p[group][1]) for p in parts) if group[1] == "scalars" else None
        start = 0
        for path, shape, width in items:
            sums[path] = total[start : start + width].reshape(shape)
            if total_sq is not None:
                sumsq[path] = total_sq[start : start + width].reshape(shape)
            start += width
    return Moments(n_seeds, sums, sumsq)


def _host(x: jax.Array) -> np.ndarray:
    """Partial sums (sub-chunks, parts, ...) added on the host in float64 (across processes
    too)."""
    if not x.is_fully_addressable:  # sharded over several processes: gather the parts first
        from jax.experimental import multihost_utils

        x = multihost_utils.process_allgather(x, tiled=True)
    return np.sum(np.asarray(x, dtype=np.float64), axis=(0, 1))


def _flatten(tree: dict, prefix: str = ""):
    """Nested output dicts → ("outer/inner", leaf) pairs, in the dicts' order."""
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}/")
        else:
            yield prefix + k, v


@dataclasses.dataclass(frozen=True)
class ErrorStats:
    """MSE of an estimate against the exact value, from per-seed error vectors e = ĝ − g.

    ``mse`` = mean ‖e‖² with a normal 95% CI; ``variance`` = tr Cov(ĝ) (ddof 1);
    ``bias_sq`` = mse − variance, the unbiased estimate of ‖E ĝ − g‖² (may dip below 0 by noise).
    """

    n: int
    mse: float
    mse_se: float
    mse_ci_low: float
    mse_ci_high: float
    variance: float
    bias_sq: float


def error_stats(m: Moments, err: str = "err", sq: str = "sq") -> ErrorStats:
    """Summarise the error vector ``err`` and its squared norm ``sq`` (both per-seed outputs)."""
    n = m.n
    mse = float(m.mean(sq))
    se = m.se(sq) if n > 1 else math.nan
    # tr Cov(ĝ) with ddof 1: (Σ_s ‖e_s‖² − n ‖ē‖²) / (n − 1), from the scalar ‖e‖² and the mean e
    if err in m.sums and n > 1:
        mean_sq = float(np.sum(m.mean(err) ** 2))
        variance = (n * mse - n * mean_sq) / (n - 1)
    else:  # the mean error vector was not accumulated
        variance = math.nan
    return ErrorStats(n, mse, se, mse - Z95 * se, mse + Z95 * se, variance, mse - variance)
