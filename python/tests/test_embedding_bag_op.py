"""torch.ops.shapejit.embedding_bag against torch.embedding_bag: all four results, bit for bit,
on random cases over modes, index dtypes, padding_idx, per_sample_weights, include_last_offset,
empty bags, row strides and special values (NaN, inf, -0.0)."""
import random

import pytest
import torch

from helpers import assert_same_tensor, replay

NAMES = ("output", "offset2bag", "bag_size", "max_indices")
MODES = {0: "sum", 1: "mean", 2: "max"}


class Case:
    """One embedding_bag call; str() is the spec printed on failure."""

    def __init__(self, g: random.Random, index):
        self.index = index
        self.rows = g.choice([1, 2, 7, 50, 1000])
        self.dim = g.choice([1, 3, 8, 15, 16, 17, 31, 32, 33, 64, 85, 100, 128, 163, 300])
        self.mode = g.choice([0, 1, 2])
        self.index_dtype = g.choice([torch.int32, torch.int64])
        self.offset_dtype = g.choice([torch.int32, torch.int64])
        self.num_indices = g.choice([0, 1, 5, 40, 300])
        self.include_last_offset = g.random() < 0.3
        bags = g.choice([1, 2, 3, 17, 64])
        self.padding_idx = g.randrange(-self.rows, self.rows) if g.random() < 0.35 else None
        self.weighted = self.mode == 0 and g.random() < 0.5
        # Table layout: dense, rows farther apart than dim, or columns strided (ATen's slow path).
        self.layout = g.choice(["dense", "dense", "row_pad", "col_stride"])
        self.psw_strided = self.weighted and g.random() < 0.3
        self.specials = g.random() < 0.25
        self.torch_seed = g.randrange(1 << 31)
        # Sorted offsets from 0 (repeats make empty bags); include_last_offset ends at N.
        cuts = sorted(g.randrange(0, self.num_indices + 1) for _ in range(bags - 1))
        self.offsets = [0] + cuts + ([self.num_indices] if self.include_last_offset else [])

    def __str__(self):
        return ("case {}: rows={} dim={} mode={} indices={}[{}] offsets={}[{}] include_last_offset={} "
                "padding_idx={} weighted={} layout={} psw_strided={} specials={}").format(
            self.index, self.rows, self.dim, MODES[self.mode], self.index_dtype, self.num_indices,
            self.offset_dtype, len(self.offsets), self.include_last_offset, self.padding_idx, self.weighted,
            self.layout, self.psw_strided, self.specials)

    def tensors(self):
        gen = torch.Generator().manual_seed(self.torch_seed)
        if self.layout == "col_stride":
            wide = torch.randn(self.dim, self.rows, generator=gen).t()
        else:
            wide = torch.randn(self.rows, self.dim + (3 if self.layout == "row_pad" else 0), generator=gen)
        if self.specials:  # NaN, infinities and -0.0 in a few places
            for value in (float("nan"), float("inf"), float("-inf"), -0.0, 0.0):
                count = max(1, wide.numel() // 50)
                r = torch.randint(0, wide.shape[0], (count,), generator=gen)
                c = torch.randint(0, wide.shape[1], (count,), generator=gen)
                wide[r, c] = value
        weight = wide[:, :self.dim]
        indices = torch.randint(0, self.rows, (self.num_indices,), generator=gen)
        if self.padding_idx is not None and self.num_indices:
            pad_row = self.padding_idx % self.rows
            indices[torch.rand(self.num_indices, generator=gen) < 0.3] = pad_row
        psw = None
        if self.weighted:
            psw = torch.randn(self.num_indices * (2 if self.psw_strided else 1), generator=gen)
            psw = psw[::2] if self.psw_strided else psw
        return (weight, indices.to(self.index_dtype), torch.tensor(self.offsets, dtype=self.offset_dtype), psw)


def check_case(sj, case):
    weight, indices, offsets, psw = case.tensors()
    args = (weight, indices, offsets, False, case.mode, False, psw, case.include_last_offset, case.padding_idx)
    expected = torch.embedding_bag(*args)
    actual = sj.embedding_bag(*args)
    # Bit for bit, weighted sums included: with padding_idx, a column-strided table or strided
    # weights torch runs ATen's own loop (each product rounded first), and the op asks the
    # engine for that loop's arithmetic (aten_loop_arithmetic).
    for name, a, e in zip(NAMES, actual, expected):
        assert_same_tensor(a, e, "{}: {}".format(case, name))
    # The output-only op (shapejit.EmbeddingBag's forward) computes the same output.
    output_only = torch.ops.shapejit.embedding_bag_output(weight, indices, offsets, case.mode, psw,
                                                          case.include_last_offset, case.padding_idx)
    assert_same_tensor(output_only, actual[0], "{}: embedding_bag_output vs embedding_bag".format(case))


def test_random_cases_match_torch_bitwise(sj, seed):
    g = random.Random(seed)
    cases = [Case(g, i) for i in range(400)]
    covered = {(c.mode, c.index_dtype, c.offset_dtype, c.padding_idx is not None, c.include_last_offset,
                c.layout) for c in cases}
    assert len(covered) >= 40, replay("the generator covers too few combinations")
    for case in cases:
        check_case(sj, case)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_large_call_runs_threaded_and_matches(sj, seed, mode):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(20000, 96, generator=gen)
    indices = torch.randint(0, 20000, (100000,), generator=gen)
    offsets = torch.sort(torch.randint(0, 100000, (4000,), generator=gen)).values
    offsets[0] = 0
    for a, e, name in zip(sj.embedding_bag(weight, indices, offsets, mode=mode),
                          torch.embedding_bag(weight, indices, offsets, False, mode), NAMES):
        assert_same_tensor(a, e, "large {} {}".format(MODES[mode], name))


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_2d_indices_are_fixed_length_bags(sj, seed, mode, dtype):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(30, 20, generator=gen)
    indices = torch.randint(0, 30, (7, 4), generator=gen, dtype=torch.int64).to(dtype)
    psw = torch.randn(7, 4, generator=gen) if mode == 0 else None
    offsets = torch.arange(0, 28, 4, dtype=dtype)
    expected = torch.embedding_bag(weight, indices.reshape(-1), offsets, False, mode, False,
                                   None if psw is None else psw.reshape(-1), False, 3)
    actual = sj.embedding_bag(weight, indices, None, False, mode, False, psw, False, 3)
    for a, e, name in zip(actual, expected, NAMES):  # weighted with padding: both round each product
        assert_same_tensor(a, e, "2-D {} {}".format(MODES[mode], name))
    # The op also matches torch.nn.functional.embedding_bag's output for the 2-D form.
    ref = torch.nn.functional.embedding_bag(indices, weight, mode=MODES[mode], per_sample_weights=psw,
                                            padding_idx=3)
    assert_same_tensor(actual[0], ref, "2-D functional {}".format(MODES[mode]))


def test_keyword_defaults_follow_torch_schema(sj):
    weight = torch.arange(12.0).reshape(6, 2)
    out = sj.embedding_bag(weight, torch.tensor([1, 2, 5]), torch.tensor([0, 1]))
    assert torch.equal(out[0], torch.tensor([[2.0, 3.0], [14.0, 16.0]]))  # mode 0 (sum) by default
    out = sj.embedding_bag(weight, torch.tensor([1, 2, 5]), torch.tensor([0, 1]), mode=1, padding_idx=5)
    assert torch.equal(out[0], torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    assert str(torch.ops.shapejit.embedding_bag.default._schema).startswith(
        "shapejit::embedding_bag(Tensor weight, Tensor indices, Tensor? offsets=None, bool scale_grad_by_freq=False, "
        "int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, "
        "int? padding_idx=None)")


def test_non_contiguous_inputs(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(9, 40, generator=gen).t()  # columns strided: copied, same result
    indices = torch.randint(0, 40, (30,), generator=gen)[::2]
    offsets = torch.tensor([0, 0, 3, 9, 9, 12, 12, 15, 15])[::2]
    for mode in (0, 1, 2):
        for a, e, name in zip(sj.embedding_bag(weight, indices, offsets, mode=mode),
                              torch.embedding_bag(weight, indices, offsets, False, mode), NAMES):
            assert_same_tensor(a, e, "non-contiguous {} {}".format(MODES[mode], name))


@pytest.mark.parametrize("call, message", [
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 2]), torch.tensor([1])), "offsets[0]"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 10]), torch.tensor([0])), "10"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, -1]), torch.tensor([0])), "-1"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1]), torch.tensor([0]), padding_idx=10), "padding_idx"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1]), torch.tensor([0]), mode=1,
                                    per_sample_weights=torch.ones(1)), "per_sample_weights"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 2]), torch.tensor([0]),
                                    per_sample_weights=torch.ones(3)), "per_sample_weights"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([[1, 2]]), torch.tensor([0])), "2-D"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 2])), "offsets"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 2]), torch.tensor([0]), mode=3), "mode"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1.0]), torch.tensor([0])), "indices"),
    (lambda sj, w: sj.embedding_bag(w, torch.tensor([1, 2, 3]), torch.tensor([0, 2]),
                                    include_last_offset=True), "offset"),
])
def test_invalid_calls_raise_runtime_error_naming_the_rule(sj, call, message):
    weight = torch.randn(10, 4)
    with pytest.raises(RuntimeError, match=None) as info:
        call(sj, weight)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_tables_take_weights_of_their_dtype(sj, dtype):
    """f16 / bf16 tables (checked against torch by test_oracle_half_tables.py): outputs of the
    table's dtype; per_sample_weights of another dtype are refused, as torch refuses f32 ones
    with an f16 table."""
    weight = torch.randn(6, 3).to(dtype)
    indices, offsets = torch.tensor([1, 2, 5]), torch.tensor([0, 1])
    out = sj.embedding_bag(weight, indices, offsets, per_sample_weights=torch.ones(3, dtype=dtype))
    assert out[0].dtype == dtype and out[0].shape == (2, 3)
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        sj.embedding_bag(weight, indices, offsets, per_sample_weights=torch.ones(3))


def test_other_dtypes_and_devices_are_rejected(sj):
    with pytest.raises(RuntimeError, match="Double|float64"):
        sj.embedding_bag(torch.randn(4, 3, dtype=torch.float64), torch.tensor([1]), torch.tensor([0]))
    # int16 indices with int64 offsets promote to int64 as in torch (test_index_dtypes.py); with
    # int16 offsets they stay int16, which torch refuses too.
    with pytest.raises(RuntimeError, match=r"indices \(Short\) and offsets \(Short\) promote to Short"):
        sj.embedding_bag(torch.randn(4, 3), torch.tensor([1], dtype=torch.int16), torch.tensor([0], dtype=torch.int16))
    with pytest.raises(RuntimeError, match="dtype"):
        sj.embedding_bag(torch.randn(4, 3), torch.tensor([1]), torch.tensor([0]),
                         per_sample_weights=torch.ones(1, dtype=torch.float64))
