"""Engine-wide settings and queries: the thread count, the version, the ISA the engine generates
code for, and its kernel-cache statistics (torch.ops.shapejit.* underneath, so TorchScript code
can call those ops directly).

Threads: by default the engine follows PyTorch. Every shapejit op first compares
torch.get_num_threads() with the count it last applied and resizes the engine's thread arena when
they differ, so torch.set_num_threads(k) takes effect from the next shapejit call on.
set_num_threads(n) with n > 0 fixes the count at n, whatever torch uses; set_num_threads(0)
returns to following torch. The count is at most max_num_threads(), the CPUs the process may use
(as oneTBB counts them: its threads cannot outnumber them): an explicit larger n is refused, and
a larger torch count is followed as max_num_threads().
"""
import torch

_ops = torch.ops.shapejit


def version():
    """The version of the loaded extension ("0.2.0"), from include/shapejit/version.h."""
    return _ops.version()


def isa():
    """The instruction set the engine generates kernels for on this host: "avx512", "avx2",
    "neon" or "scalar" (the best the CPU runs, capped by the SHAPEJIT_ISA environment variable)."""
    return _ops.isa()


def kernel_cache_stats():
    """The engine's counters since the process started, as a dict of ints: hits, misses,
    compilations, failed_compilations, compile_time_ns, code_bytes, kernels, generic_fallbacks,
    code_limit_bytes, reference_linear_groups (the fields of shapejit_kernel_cache_stats)."""
    return dict(_ops.kernel_cache_stats())


def get_num_threads():
    """The engine's thread count now: n after set_num_threads(n > 0); otherwise the value of
    torch.get_num_threads() that the latest shapejit call picked up (at most max_num_threads()) (a torch.set_num_threads
    made since then applies at the next call). 1 means calls run on the calling thread."""
    return _ops.get_num_threads()


def max_num_threads():
    """The most threads the engine runs at once: the CPUs this process may use (its affinity
    mask, as oneTBB counts them), at most 1024."""
    return _ops.max_num_threads()


def set_num_threads(n):
    """n > 0: the engine uses n threads from now on, whatever torch.set_num_threads says.
    n == 0: the engine follows torch.get_num_threads() again (applied at once, then at every call),
    capped at max_num_threads(). Raises RuntimeError for n < 0 or n > max_num_threads()."""
    _ops.set_num_threads(int(n))
