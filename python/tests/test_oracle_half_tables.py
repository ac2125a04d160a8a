"""Oracle families for f16 and bf16 tables (docs/quantized-tables-semantics.md, section 1):
torch.ops.shapejit.embedding_bag against torch.embedding_bag on the same table, all four results
bit for bit.

bf16 (rule H6) follows torch 2.x's two paths: FBGEMM's (fused weighted terms, sums rounded half
up) and ATen's own loop, which torch takes with padding_idx and also for a column-strided table or
strided per_sample_weights; the op asks the engine for that loop's arithmetic in all those cases
(aten_loop_arithmetic), so every case is compared with torch on the tensors given."""
import pytest
import torch

from oracle import Outcome, compare, describe, run_family, single_threaded_torch

NAMES = ("output", "offset2bag", "bag_size", "max_indices")


@pytest.fixture(autouse=True)
def one_thread():
    restore = single_threaded_torch()
    yield
    restore()


class Case:
    """One random call over a table of `dtype`; str() prints everything needed to rebuild it."""

    def __init__(self, g, dtype):
        self.dtype = dtype
        self.rows = g.choice([1, 2, 7, 50, 300])
        self.dim = g.choice([1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 128, 300])
        self.mode = g.choice([0, 1, 2])
        self.index_dtype = g.choice([torch.int32, torch.int64])
        self.offset_dtype = g.choice([torch.int32, torch.int64])
        # Long bags now and then: mean rounds its count to the table dtype above 2048 (f16) / 256 (bf16).
        self.num_indices = g.choice([0, 1, 5, 40, 300, 300]) if g.random() < 0.95 else g.choice([2100, 4100])
        self.two_d = g.random() < 0.15 and self.num_indices > 0
        self.include_last_offset = not self.two_d and g.random() < 0.3
        self.padding_idx = g.randrange(-self.rows, self.rows) if g.random() < 0.35 else None
        self.weighted = self.mode == 0 and g.random() < 0.5
        self.layout = g.choice(["dense", "dense", "row_pad", "col_stride"])
        self.psw_strided = self.weighted and not self.two_d and g.random() < 0.25
        # Magnitude: ordinary, large (sums overflow to inf), tiny (subnormals), with NaN/inf/-0.0.
        if dtype == torch.float16:
            self.scale = g.choice([1.0, 1.0, 1.0, 3e4, 1e-6])
        else:  # bf16 also near f32's ends, where a weighted term's fma and rounded product differ
            self.scale = g.choice([1.0, 1.0, 1.0, 1e37, 1e-6, 1e-37, 3e38])
        self.specials = g.random() < 0.25
        self.torch_seed = g.randrange(1 << 31)
        if self.two_d:
            self.bag_len = g.choice([1, 2, 5, 20])
            self.num_indices = max(1, self.num_indices // self.bag_len) * self.bag_len
            self.offsets = list(range(0, self.num_indices, self.bag_len))
            self.offset_dtype = self.index_dtype  # what the 2-D form's offsets are
        else:
            bags = g.choice([1, 2, 3, 17, 64] if self.num_indices <= 300 else [1, 2])
            cuts = sorted(g.randrange(0, self.num_indices + 1) for _ in range(bags - 1))
            # Never a partial final offset: torch 1.13 corrupts its heap on one with f16 tables.
            self.offsets = [0] + cuts + ([self.num_indices] if self.include_last_offset else [])

    def tensors(self):
        gen = torch.Generator().manual_seed(self.torch_seed)
        if self.layout == "col_stride":
            wide = torch.randn(self.dim, self.rows, generator=gen).t()
        else:
            wide = torch.randn(self.rows, self.dim + (3 if self.layout == "row_pad" else 0), generator=gen)
        wide = wide * self.scale
        if self.specials:
            for value in (float("nan"), float("inf"), float("-inf"), -0.0, 0.0):
                count = max(1, wide.numel() // 50)
                wide[torch.randint(0, wide.shape[0], (count,), generator=gen),
                     torch.randint(0, wide.shape[1], (count,), generator=gen)] = value
        weight = wide.to(self.dtype)[:, :self.dim]
        indices = torch.randint(0, self.rows, (self.num_indices,), generator=gen)
        if self.padding_idx is not None and self.num_indices:
            indices[torch.rand(self.num_indices, generator=gen) < 0.3] = self.padding_idx % self.rows
        psw = None
        if self.weighted:
            psw = (torch.randn(self.num_indices * (2 if self.psw_strided else 1), generator=gen) * 2).to(self.dtype)
            psw = psw[::2] if self.psw_strided else psw
        offsets = torch.tensor(self.offsets, dtype=self.offset_dtype)
        return weight, indices.to(self.index_dtype), offsets, psw

    def __str__(self):
        return ("{} rows={} dim={} mode={} indices {}[{}] offsets {}={} two_d={} include_last_offset={} "
                "padding_idx={} weighted={} layout={} psw_strided={} scale={} specials={} torch_seed={}").format(
            self.dtype, self.rows, self.dim, self.mode, self.index_dtype, self.num_indices, self.offset_dtype,
            self.offsets if len(self.offsets) <= 70 else "[{} offsets]".format(len(self.offsets)), self.two_d,
            self.include_last_offset, self.padding_idx, self.weighted, self.layout, self.psw_strided, self.scale,
            self.specials, self.torch_seed)


def shapejit_call(sj, case, weight, indices, offsets, psw):
    if case.two_d:  # the op's 2-D form: offsets None, indices [B, L]
        rows2d = indices.reshape(-1, case.bag_len)
        psw2d = None if psw is None else psw.reshape(-1, case.bag_len)
        return lambda: sj.embedding_bag(weight, rows2d, None, False, case.mode, False, psw2d, False,
                                        case.padding_idx)
    return lambda: sj.embedding_bag(weight, indices, offsets, False, case.mode, False, psw,
                                    case.include_last_offset, case.padding_idx)


def check_family(sj, dtype):
    family = "embedding_bag_" + ("f16" if dtype == torch.float16 else "bf16")

    def make_case(g, case_seed):
        case = Case(g, dtype)
        weight, indices, offsets, psw = case.tensors()
        expected = Outcome(lambda: torch.embedding_bag(weight, indices, offsets, False, case.mode, False, psw,
                                                       case.include_last_offset, case.padding_idx))
        actual = Outcome(shapejit_call(sj, case, weight, indices, offsets, psw))
        text = "{}\n  indices={}\n  psw={}".format(case, describe(indices), describe(psw))
        compare(family, case_seed, text, actual, expected, NAMES)
        return expected.error is None

    run_family(family, make_case, min_accepted=0.99)


def test_f16_tables_match_torch_embedding_bag(sj):
    check_family(sj, torch.float16)


def test_bf16_tables_match_torch_embedding_bag(sj):
    check_family(sj, torch.bfloat16)
