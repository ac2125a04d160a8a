"""shapejit_rowwise_prepack / _unpack (docs/quantized-tables-semantics.md §5) against torch 1.13's
quantized::embedding_bag_{byte,4bit,2bit}_prepack and _unpack, byte for byte, on random tables from a
printed seed.

The library is loaded through ctypes from SHAPEJIT_LIB (default /work/main/build-h5/libshapejit.so), so
this needs no torch extension. Replay a failure with SHAPEJIT_TEST_SEED=<seed> (printed in the pytest
header and in every failure message, which also prints the failing case).
"""
import ctypes
import os

import numpy as np
import pytest
import torch

from helpers import replay

CASES = int(os.environ.get("SHAPEJIT_ROWWISE_CASES", "2000"))
DEFAULT_LIB = "/work/main/build-h5/libshapejit.so"

F32, F16, Q8, Q4, Q2 = 0, 1, 5, 6, 7
BITS = {Q8: 8, Q4: 4, Q2: 2}
PREPACK = {Q8: "embedding_bag_byte_prepack", Q4: "embedding_bag_4bit_prepack", Q2: "embedding_bag_2bit_prepack"}
UNPACK = {Q8: "embedding_bag_byte_unpack", Q4: "embedding_bag_4bit_unpack", Q2: "embedding_bag_2bit_unpack"}


class PrepackArgs(ctypes.Structure):
    _fields_ = [("qtype", ctypes.c_int), ("src", ctypes.c_void_p), ("src_dtype", ctypes.c_int),
                ("rows", ctypes.c_int64), ("dim", ctypes.c_int64), ("src_row_stride", ctypes.c_int64),
                ("optimized_qparams", ctypes.c_int32), ("nbins", ctypes.c_int64), ("ratio", ctypes.c_float)]


@pytest.fixture(scope="module")
def lib():
    path = os.environ.get("SHAPEJIT_LIB", DEFAULT_LIB)
    if not os.path.exists(path):
        if "SHAPEJIT_LIB" in os.environ:
            pytest.fail("SHAPEJIT_LIB={} does not exist".format(path))
        pytest.skip("no shapejit library at {} (set SHAPEJIT_LIB)".format(path))
    so = ctypes.CDLL(path)
    so.shapejit_rowwise_row_bytes.restype = ctypes.c_int64
    so.shapejit_rowwise_row_bytes.argtypes = [ctypes.c_int, ctypes.c_int64]
    so.shapejit_rowwise_prepack.restype = ctypes.c_int
    so.shapejit_rowwise_prepack.argtypes = [ctypes.POINTER(PrepackArgs), ctypes.c_void_p]
    so.shapejit_rowwise_unpack.restype = ctypes.c_int
    so.shapejit_rowwise_unpack.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                           ctypes.c_int64, ctypes.c_void_p]
    so.shapejit_last_error.restype = ctypes.c_char_p
    torch.set_num_threads(1)
    return so


def sj_prepack(so, qtype, table, optimized, nbins=200, ratio=0.16, pad=0):
    """Packs the 2-D f32/f16 numpy `table` through the C ABI, rows `pad` elements wider than D.
    Returns (status, bytes or error message)."""
    rows, dim = table.shape
    src = np.zeros((rows, dim + pad), dtype=table.dtype)
    src[:, :dim] = table
    row_bytes = so.shapejit_rowwise_row_bytes(qtype, dim)
    dst = np.zeros((rows, row_bytes), dtype=np.uint8)
    args = PrepackArgs(qtype, src.ctypes.data, F16 if table.dtype == np.float16 else F32, rows, dim, dim + pad,
                       int(optimized), nbins, ratio)
    status = so.shapejit_rowwise_prepack(ctypes.byref(args), dst.ctypes.data)
    return (status, dst) if status == 0 else (status, so.shapejit_last_error().decode())


def sj_unpack(so, qtype, packed, dim, pad=0):
    rows, width = packed.shape
    src = np.zeros((rows, width + pad), dtype=np.uint8)
    src[:, :width] = packed
    dst = np.zeros((rows, dim), dtype=np.float32)
    status = so.shapejit_rowwise_unpack(qtype, src.ctypes.data, rows, dim, width + pad, dst.ctypes.data)
    assert status == 0, so.shapejit_last_error().decode()
    return dst


def torch_prepack(qtype, table, optimized, nbins=200, ratio=0.16):
    t = torch.from_numpy(table)
    op = getattr(torch.ops.quantized, PREPACK[qtype])
    if qtype == Q8:  # torch 1.13 corrupts f16 byte prepack; shapejit widens exactly first (the recommended
        # rule). numpy widens exactly; torch's .float() would quiet a signalling NaN, the bias of a row
        # starting with one.
        return op(torch.from_numpy(table.astype(np.float32))).numpy()
    return op(t, optimized_qparams=optimized, nbins=nbins, ratio=ratio).numpy()


# ---- random rows --------------------------------------------------------------------------------
SPECIALS = np.array([np.inf, -np.inf, np.nan, -np.nan, -0.0, 0.0, 65504.0, -65520.0, 7e4, 1e-8, -3e38],
                    dtype=np.float32)


def random_row(rng, dim, qmax, kind):
    if kind == "normal":
        scale = 10.0 ** rng.uniform(-8, 6)
        return (rng.standard_normal(dim) * scale + rng.choice([0.0, 1.0, -3.0, 100.0]) * scale).astype(np.float32)
    if kind == "ties":  # a grid of half steps over exactly [0, qmax]: every (x - min) * inv is k / 2
        row = (rng.integers(0, 2 * qmax + 1, dim) / 2.0).astype(np.float32)
        if dim >= 2:
            row[rng.choice(dim, 2, replace=False)] = [0.0, float(qmax)]
        return row + np.float32(rng.choice([0.0, 0.0, 1.0, -8.0]))
    if kind == "constant":
        return np.full(dim, rng.choice([0.0, -0.0, 1.5, -7.25, 1e30, 3e-8]), dtype=np.float32)
    if kind == "special":
        row = (rng.standard_normal(dim) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
        hits = rng.integers(1, max(2, dim // 4) + 1)
        row[rng.integers(0, dim, hits)] = rng.choice(SPECIALS, hits)
        return row
    if kind == "huge":
        return (rng.uniform(-1, 1, dim) * 10.0 ** rng.uniform(4, 38.5)).astype(np.float32)
    if kind == "tiny":  # f16 subnormals and below
        return (rng.standard_normal(dim) * 10.0 ** rng.uniform(-12, -4)).astype(np.float32)
    if kind == "bits":  # any f32 bit pattern (NaN payloads, subnormals, infinities)
        return rng.integers(0, 1 << 32, dim, dtype=np.uint64).astype(np.uint32).view(np.float32)
    raise AssertionError(kind)


def random_table(rng, qtype, allow_f16, kinds):
    per = 8 // BITS[qtype]
    dim = int(rng.integers(1, 300 // per + 1)) * per
    rows = int(rng.integers(1, 4))
    qmax = (1 << BITS[qtype]) - 1
    table = np.stack([random_row(rng, dim, qmax, kinds[int(rng.integers(0, len(kinds)))]) for _ in range(rows)])
    if allow_f16 and rng.random() < 0.3:
        with np.errstate(over="ignore"):
            table = table.astype(np.float16)
    return table


def describe(table):
    bits = table.view(np.uint16 if table.dtype == np.float16 else np.uint32)
    return "dtype {} shape {}\nvalues {}\nbits {}".format(table.dtype, table.shape, table.tolist(),
                                                           [[hex(int(b)) for b in r] for r in bits])


def first_byte_difference(a, b):
    bad = np.argwhere(a != b)
    return None if len(bad) == 0 else tuple(int(i) for i in bad[0])


FAMILIES = [("byte", Q8, False), ("4bit", Q4, False), ("2bit", Q2, False), ("4bit_optimized", Q4, True),
            ("2bit_optimized", Q2, True)]


@pytest.mark.parametrize("family,qtype,optimized", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_prepack_matches_torch(lib, seed, family, qtype, optimized):
    rng = np.random.default_rng(seed)
    kinds = ["normal", "ties", "constant", "special", "huge", "tiny", "bits"]
    compared = rejected = nan_rows_skipped = 0
    for case in range(CASES):
        table = random_table(rng, qtype, allow_f16=True, kinds=kinds)
        pad = int(rng.choice([0, 0, 3]))
        nbins, ratio = (200, 0.16) if rng.random() < 0.8 else (int(rng.integers(1, 400)), float(rng.uniform(0, 0.5)))
        status, got = sj_prepack(lib, qtype, table, optimized, nbins, ratio, pad)
        where = "{} case {} seed {} (nbins {}, ratio {}, pad {})\n{}".format(family, case, seed, nbins, ratio, pad,
                                                                              describe(table))
        if optimized and status != 0 and "never ends" in got:
            rejected += 1  # torch would loop forever on this row: never sent to it
            continue
        assert status == 0, replay("{}: status {} ({})".format(where, status, got))
        expected = torch_prepack(qtype, table, optimized, nbins, ratio)
        if qtype == Q8 or optimized:
            # Known differences from torch 2.13 (docs/quantized-tables-semantics.md section 10): FBGEMM's
            # codes of 8-bit rows holding a NaN, and the NaN scale's sign the optimized search stores.
            # Those rows are left out of the comparison and counted; every other row must match.
            nan_rows = np.isnan(table.astype(np.float32)).any(axis=1)
            nan_rows_skipped += int(nan_rows.sum())
            got, expected = got[~nan_rows], expected[~nan_rows]
        at = first_byte_difference(got, expected)
        assert at is None, replay("{}: prepacked bytes differ first at (row, byte) {}: got {}, expected {}\n"
                                  "got row {}\nexpected row {}".format(where, at, got[at], expected[at],
                                                                       got[at[0]].tolist(), expected[at[0]].tolist()))
        compared += 1
    print("rowwise prepack {}: {} cases equal to torch byte for byte, {} rejected as non-terminating, {} rows "
          "holding NaN not compared, seed {}".format(family, compared, rejected, nan_rows_skipped, seed))
    assert compared >= CASES * 0.95


def test_unpack_matches_torch(lib, seed):
    rng = np.random.default_rng(seed)
    compared = 0
    for case in range(CASES):
        qtype = [Q8, Q4, Q2][case % 3]
        per = 8 // BITS[qtype]
        dim = int(rng.integers(0, 300 // per + 1)) * per
        rows = int(rng.integers(1, 4))
        if rng.random() < 0.5:  # random bytes: any code, scale and bias bits (NaN, inf, subnormal)
            width = (dim + 8) if qtype == Q8 else dim // per + 4
            packed = rng.integers(0, 256, (rows, width), dtype=np.uint8)
        else:  # real rows
            table = random_table(rng, qtype, allow_f16=False, kinds=["normal", "ties", "special"])
            dim = table.shape[1]
            packed = torch_prepack(qtype, table, False)
        assert lib.shapejit_rowwise_row_bytes(qtype, dim) == packed.shape[1]
        pad = int(rng.choice([0, 0, 5]))
        got = sj_unpack(lib, qtype, packed, dim, pad)
        expected = getattr(torch.ops.quantized, UNPACK[qtype])(torch.from_numpy(packed)).numpy()
        assert expected.shape == got.shape
        both_nan = np.isnan(got) & np.isnan(expected)  # NaN payloads are not specified
        at = first_byte_difference(np.where(both_nan, 0, got.view(np.uint32)),
                                   np.where(both_nan, 0, expected.view(np.uint32)))
        assert at is None, replay("unpack case {} seed {} qtype {} dim {}: first difference at {}: got {}, expected {}\n"
                                  "packed row {}".format(case, seed, qtype, dim, at, got[at], expected[at],
                                                         packed[at[0]].tolist()))
        compared += 1
    print("rowwise unpack: {} cases equal to torch, seed {}".format(compared, seed))


def test_non_terminating_search_is_rejected(lib):
    """torch never returns on this row (the step is below half an ulp at 1e8); shapejit says so."""
    row = np.array([[1e8, 1e8 + 56, 1e8 + 8, 1e8]], dtype=np.float32)
    for qtype in (Q4, Q2):
        status, message = sj_prepack(lib, qtype, row, optimized=True)
        assert status == 1 and "never ends" in message, message
        status, packed = sj_prepack(lib, qtype, row, optimized=False)
        assert status == 0
        assert (packed == torch_prepack(qtype, row, False)).all()
