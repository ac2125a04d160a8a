"""Comparison helpers for the Python tests: bitwise float comparison (NaN-ness for NaN), the
split-GEMM tolerance, and replay messages."""
import os
import random

import torch

BASE_SEED = int(os.environ.get("SHAPEJIT_TEST_SEED", random.randrange(1 << 31)))

_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
             torch.float64: torch.int64}


def replay(what):
    """Appended to assertion messages: what failed and how to replay it."""
    return "{} (replay with SHAPEJIT_TEST_SEED={})".format(what, BASE_SEED)


def first_difference(mask):
    """Index tuple of the first True element of `mask`, or None."""
    hits = mask.nonzero()
    return None if hits.numel() == 0 else tuple(hits[0].tolist())


def assert_same_tensor(actual, expected, what, tolerance=None):
    """Same dtype, shape and values. Floats compare bit for bit (a NaN only has to meet a NaN),
    or within `tolerance` (a tensor like expected) where given and both values are finite."""
    assert actual.dtype == expected.dtype, replay("{}: dtype {} != {}".format(what, actual.dtype, expected.dtype))
    assert actual.shape == expected.shape, replay("{}: shape {} != {}".format(what, tuple(actual.shape),
                                                                             tuple(expected.shape)))
    if not expected.is_floating_point():
        bad = actual != expected
    else:
        a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
        both_nan = a_nan & e_nan
        if tolerance is None:
            iv = _INT_VIEW[expected.dtype]
            bad = (actual.contiguous().view(iv) != expected.contiguous().view(iv)) & ~both_nan
        else:
            finite = torch.isfinite(actual) & torch.isfinite(expected)
            close = (actual.double() - expected.double()).abs() <= tolerance
            same_bits = actual.contiguous().view(_INT_VIEW[expected.dtype]) == expected.contiguous().view(
                _INT_VIEW[expected.dtype])
            bad = ~((finite & close) | same_bits | both_nan)
    at = first_difference(bad)
    if at is not None:
        raise AssertionError(replay("{}: {} of {} elements differ; first at {}: got {}, expected {}{}".format(
            what, int(bad.sum()), bad.numel(), at, actual[at].item(), expected[at].item(),
            "" if tolerance is None else " (tolerance {})".format(tolerance[at].item()))))


def ulp(x):
    """ulp of float32 values (as float64), for the split-GEMM acceptance rule."""
    x = x.float().abs()
    return (torch.nextafter(x, torch.full_like(x, float("inf"))) - x).double()


def linear_reference(x, w, b):
    """Y = X W^T + b accumulated in float64 (the semantics' reference), and the acceptance bound
    2 K 2^-24 (sum_k |x w| + |b|) + ulp(ref)."""
    xd, wd = x.double(), w.double()
    ref = xd @ wd.T
    mag = xd.abs() @ wd.abs().T
    if b is not None:
        ref = ref + b.double()
        mag = mag + b.double().abs()
    k = x.shape[-1]
    return ref, 2.0 * k * 2.0 ** -24 * mag + ulp(ref.float())


def heads(y, nb, seq_len, h, batch_first):
    """[rows, H*Dh] with seq-first (row = l*Nb + n) or batch-first rows -> [Nb, H, L, Dh]."""
    y = y.reshape(nb, seq_len, h, -1) if batch_first else y.reshape(seq_len, nb, h, -1).transpose(0, 1)
    return y.permute(0, 2, 1, 3).contiguous()
