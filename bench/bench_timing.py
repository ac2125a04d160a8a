"""Interleaved timing for the Python benchmarks: round r runs a batch of back-to-back calls of
each function in turn, so load on a shared machine hits every side alike; a figure is per call."""
import statistics
import time


def batch_calls(fn, target_us):
    """How many back-to-back calls make one batch of about target_us."""
    fn()
    t0 = time.perf_counter_ns()
    fn()
    one_us = max((time.perf_counter_ns() - t0) / 1000.0, 0.05)
    return max(1, int(target_us / one_us))


def time_rounds(fns, rounds, target_us):
    """Per function, the microseconds per call of every round, batches of all of them interleaved."""
    counts = [batch_calls(f, target_us) for f in fns]
    per_round = [[] for _ in fns]
    for _ in range(rounds):
        for i, (f, n) in enumerate(zip(fns, counts)):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f()
            per_round[i].append((time.perf_counter_ns() - t0) / 1000.0 / n)
    return per_round


def time_interleaved(fns, rounds, target_us):
    """Minimum microseconds per call of each function."""
    return [min(r) for r in time_rounds(fns, rounds, target_us)]


def time_min_median(fns, rounds, target_us):
    """(minimum, median) microseconds per call of each function."""
    return [(min(r), statistics.median(r)) for r in time_rounds(fns, rounds, target_us)]
