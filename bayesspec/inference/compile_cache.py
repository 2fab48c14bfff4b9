"""nutpie's compile of a PyMC model, with the part numba recompiles every run cached on
disk.

``nutpie.compile_pymc_model`` has two parts. PyTensor turns the model's log density (and
the draws' expansion) into numba functions, and caches their machine code on disk in its
compile directory (``~/.pytensor/numba``), keyed by the graph. nutpie then wraps each in a
small numba C callback that reads the ``pm.Data`` arrays from a record it passes at run
time. numba refuses to cache those wrappers ("uses dynamic globals": they capture the
shared arrays), so every new process compiled them again: about 7 of the 9 s a
speculative fit took to compile with PyTensor's cache warm (measured when this module was
written, 2026-12-04; ``benchmarks/answer_speed.py first-fit`` times a cold compile
against a warm one).

This module writes the wrappers as numba can cache them: no captured arrays (the record
is read as 64-bit words at offsets taken from its dtype), everything fixed at compile
time spelled in the generated source, and the source registered with PyTensor's cache
locator under a key that hashes that source and the wrapped PyTensor function's own
cache key (a changed model graph, shapes' ranks, dtypes or layout gives another key).
The wrappers keep nutpie's calling convention and return codes. When PyTensor's numba
cache is off, or the wrapped function has no cache key, or this nutpie's internals are
not the ones this was written against, nutpie's own wrappers are used, uncached.

No bayesspec imports: used by :mod:`bayesspec.inference`.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager

#: Bump to invalidate every cached wrapper (part of the key).
WRAPPER_VERSION = "2"

_PATCH_LOCK = threading.RLock()
_PATCHED = ("_make_c_logp_func", "_make_c_expand_func")


def compile_pymc_model(pm_model, **options):
    """``nutpie.compile_pymc_model(pm_model, **options)``, its C callbacks cached on disk
    when possible (see the module's docstring)."""
    import nutpie

    internals = _nutpie_internals()
    if internals is None:
        return nutpie.compile_pymc_model(pm_model, **options)
    try:
        with _cacheable_wrappers(internals):
            # cache=True reaches numba.cfunc; nutpie's own wrappers (the fallback) ask
            # for it in vain and nutpie silences numba's "cannot cache" warning for them
            return nutpie.compile_pymc_model(pm_model, cache=True, **options)
    except Exception:  # noqa: BLE001 - e.g. an unreadable cache entry: compile as nutpie does
        return nutpie.compile_pymc_model(pm_model, **options)


def _nutpie_internals():
    """nutpie's compile module when it has the seams this module replaces and PyTensor
    caches numba code; else None."""
    try:
        from nutpie import compile_pymc
        from pytensor import config
        from pytensor.link.numba import cache  # noqa: F401 - its locator must be registered
    except ImportError:
        return None
    if not config.numba__cache or not all(hasattr(compile_pymc, n) for n in _PATCHED):
        return None
    return compile_pymc


@contextmanager
def _cacheable_wrappers(internals):
    originals = {name: getattr(internals, name) for name in _PATCHED}
    with _PATCH_LOCK:
        internals._make_c_logp_func = _logp_wrapper_maker(originals["_make_c_logp_func"])
        internals._make_c_expand_func = _expand_wrapper_maker(originals["_make_c_expand_func"])
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(internals, name, original)


# ----------------------------------------------------------------------------- layout

def _word_layout(record_dtype, keys):
    """Per shared key: (word of its data pointer, word of its size, words of its shape),
    counting 8-byte words from the start of nutpie's user-data record, and the record's
    length in words; None if the record is not made of 8-byte unsigned integers."""
    shared, base = record_dtype.fields["shared"][:2]
    if record_dtype.itemsize % 8:
        return None
    words = {}
    for key in keys:
        places = []
        for part in ("data", "size", "shape"):
            section, offset = shared.fields[part][:2]
            field_dtype, field_offset = section.fields[key][:2]
            scalar = field_dtype.base
            start = base + offset + field_offset
            if scalar.itemsize != 8 or scalar.kind != "u" or start % 8:
                return None
            # a shape field holds one word per dimension (none for a scalar)
            places.append([start // 8 + i for i in range(field_dtype.itemsize // 8)])
        if len(places[0]) != 1 or len(places[1]) != 1:
            return None
        words[key] = (places[0][0], places[1][0], places[2])
    return words, record_dtype.itemsize // 8


def _inner_cache_key(jit_function):
    """PyTensor's cache key of a numba function it made, or None."""
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    py_function = getattr(jit_function, "py_func", None)
    return CACHED_SRC_FUNCTIONS.get(py_function) if py_function is not None else None


def _shared_lines(user_data, keys, shared_data):
    """Source lines binding ``shared_i`` to each shared array (from the record's
    pointers), their names in call order, and the dtypes used; None when not possible."""
    import numpy as np

    try:
        layout = _word_layout(user_data.dtype, keys)
    except (KeyError, TypeError, AttributeError, IndexError):  # another record layout
        return None
    if layout is None:
        return None
    words, total = layout
    lines = [f"words = numba.carray(user_data_, ({total},), np.uint64)"]
    names, dtypes = [], {}
    for index, key in enumerate(keys):
        data_word, _, shape_words = words[key]
        dtype = np.dtype(shared_data[key].dtype)
        if shared_data[key].ndim != len(shape_words) or dtype.hasobject:
            return None
        dtype_name = f"dtype_{index}"
        dtypes[dtype_name] = dtype.type
        shape = "".join(f"int(words[{w}]), " for w in shape_words)
        lines.append(f"shared_{index} = numba.carray(as_pointer(words[{data_word}]), "
                     f"({shape}), {dtype_name})")
        names.append(f"shared_{index}")
    return lines, names, dtypes


def _compile_wrapper(source: str, name: str, inner, inner_key: str, dtypes: dict):
    import numba
    import numpy as np
    from pytensor.link.numba.cache import compile_numba_function_src

    key = hashlib.sha256("\n".join([WRAPPER_VERSION, inner_key, source]).encode()).hexdigest()
    # __name__: numba pickles a function's environment by its module's name and imports
    # that module when it loads the cached code
    env = {"__name__": __name__, "numba": numba, "np": np, "inner": inner,
           "as_pointer": _as_pointer(), **dtypes}
    return compile_numba_function_src(source, name, global_env=env, cache_key=key)


def _indent(lines, spaces):
    return "".join(" " * spaces + line + "\n" for line in lines)


def _logp_wrapper_maker(original):
    def make_c_logp_func(n_dim, logp_fn, user_data, shared_keys, shared_data):
        import numba

        inner_key = _inner_cache_key(logp_fn)
        shared = _shared_lines(user_data, list(shared_keys), shared_data) if inner_key else None
        if shared is None:
            return original(n_dim, logp_fn, user_data, shared_keys, shared_data)
        lines, names, dtypes = shared
        # nutpie's return codes: 0 ok, -1 wrong size, 1 error, 3 gradient or
        # 4 log density not finite
        source = (
            "def bayesspec_logp(dim, x_, out_, logp_, user_data_):\n"
            f"    if dim != {n_dim}:\n"
            "        return -1\n"
            "    try:\n"
            f"        x = numba.carray(x_, ({n_dim},))\n"
            f"        out = numba.carray(out_, ({n_dim},))\n"
            "        logp = numba.carray(logp_, ())\n"
            + _indent(lines, 8) +
            f"        value, gradient = inner(x, {', '.join(names)})\n"
            "        logp[()] = value\n"
            "        out[...] = gradient\n"
            "        if not np.all(np.isfinite(out)):\n"
            "            return 3\n"
            "        if not np.isfinite(value):\n"
            "            return 4\n"
            "    except Exception:\n"
            "        return 1\n"
            "    return 0\n")
        signature = numba.types.int64(
            numba.types.uint64, numba.types.CPointer(numba.types.double),
            numba.types.CPointer(numba.types.double),
            numba.types.CPointer(numba.types.double), numba.types.voidptr)
        return _compile_wrapper(source, "bayesspec_logp", logp_fn, inner_key, dtypes), signature

    return make_c_logp_func


def _expand_wrapper_maker(original):
    def make_c_expand_func(n_dim, n_expanded, expand_fn, user_data, shared_var_keys,
                           shared_data):
        import numba

        inner_key = _inner_cache_key(expand_fn)
        shared = (_shared_lines(user_data, list(shared_var_keys), shared_data)
                  if inner_key else None)
        if shared is None:
            return original(n_dim, n_expanded, expand_fn, user_data, shared_var_keys,
                            shared_data)
        lines, names, dtypes = shared
        # nutpie's return codes: 0 ok, -1 wrong sizes, -2 error
        source = (
            "def bayesspec_expand(dim, expanded, x_, out_, user_data_):\n"
            f"    if dim != {n_dim}:\n"
            "        return -1\n"
            f"    if expanded != {n_expanded}:\n"
            "        return -1\n"
            "    try:\n"
            f"        x = numba.carray(x_, ({n_dim},))\n"
            f"        out = numba.carray(out_, ({n_expanded},))\n"
            + _indent(lines, 8) +
            f"        (values,) = inner(x, {', '.join(names)})\n"
            "        out[...] = values\n"
            "    except Exception:\n"
            "        return -2\n"
            "    return 0\n")
        signature = numba.types.int64(
            numba.types.uint64, numba.types.uint64, numba.types.CPointer(numba.types.double),
            numba.types.CPointer(numba.types.double), numba.types.voidptr)
        return (_compile_wrapper(source, "bayesspec_expand", expand_fn, inner_key, dtypes),
                signature)

    return make_c_expand_func


_AS_POINTER = None


def _as_pointer():
    """A numba intrinsic: an integer address as a void pointer (defined once, lazily, so
    that importing this module does not import numba)."""
    global _AS_POINTER
    if _AS_POINTER is None:
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        @intrinsic
        def as_pointer(typingctx, address):
            def codegen(context, builder, signature, arguments):
                return builder.inttoptr(arguments[0], cgutils.voidptr_t)

            return types.voidptr(address), codegen

        _AS_POINTER = as_pointer
    return _AS_POINTER
