"""shapejit.quantized and shapejit.QuantizedEmbeddingBag: the prepack / unpack functions against
torch's (shapes, ranks, dtypes; the byte-for-byte battery is test_rowwise_prepack_oracle.py),
the argument rules the torch-signature functions take from torch, the extensions (padding_idx,
explicit dim, output dtypes), and the module's construction and state."""
import random

import pytest
import torch

from helpers import assert_same_tensor

Q = torch.ops.quantized


@pytest.mark.parametrize("shape", [(5,), (7, 3), (2, 3, 4), (4, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_byte_prepack_takes_any_rank_and_widens_f16(sj, seed, shape, dtype):
    weight = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)
    packed = sj.quantized.embedding_bag_byte_prepack(weight)
    # torch 1.13 corrupts f16 rows here: the rule is to pack the exactly widened table.
    assert_same_tensor(packed, Q.embedding_bag_byte_prepack(weight.float()), "byte prepack {}".format(shape))
    assert_same_tensor(sj.quantized.embedding_bag_byte_unpack(packed), Q.embedding_bag_byte_unpack(packed),
                       "byte unpack {}".format(shape))


@pytest.mark.parametrize("bits", [4, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("optimized", [False, True])
def test_nbit_prepack_and_unpack_match_torch(sj, seed, bits, dtype, optimized):
    g = torch.Generator().manual_seed(seed)
    name = "{}bit".format(bits)
    for rows, dim in [(1, 8), (9, 4), (30, 16), (3, 100 if bits == 4 else 104)]:
        weight = torch.randn(rows, dim, generator=g).to(dtype)
        expected = getattr(Q, "embedding_bag_{}_prepack".format(name))(weight, optimized, 60, 0.2)
        packed = getattr(sj.quantized, "embedding_bag_{}_prepack".format(name))(weight, optimized, 60, 0.2)
        assert_same_tensor(packed, expected, "{} prepack {}x{} {}".format(name, rows, dim, dtype))
        assert_same_tensor(getattr(sj.quantized, "embedding_bag_{}_unpack".format(name))(packed),
                           getattr(Q, "embedding_bag_{}_unpack".format(name))(packed), "{} unpack".format(name))


@pytest.mark.parametrize("call, message", [
    (lambda q: q.embedding_bag_4bit_prepack(torch.randn(2, 3, 4)), "2-D"),  # torch misreads it
    (lambda q: q.embedding_bag_2bit_prepack(torch.randn(8)), "2-D"),
    (lambda q: q.embedding_bag_byte_prepack(torch.randn(3, 4, dtype=torch.float64)), "float"),
    (lambda q: q.embedding_bag_4bit_prepack(torch.randn(3, 4).bfloat16()), "float"),
    (lambda q: q.embedding_bag_4bit_prepack(torch.randn(3, 5)), "5"),
    (lambda q: q.embedding_bag_byte_unpack(torch.zeros(3, 7, dtype=torch.uint8)), "bytes"),
    (lambda q: q.embedding_bag_byte_unpack(torch.zeros(3, 9)), "uint8"),
])
def test_prepack_and_unpack_reject_what_they_cannot_pack(sj, call, message):
    with pytest.raises(RuntimeError) as info:
        call(sj.quantized)
    assert message in str(info.value), str(info.value)


def packed_table(bits, rows=20, dim=8, seed=0):
    weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    prepack = {8: Q.embedding_bag_byte_prepack, 4: Q.embedding_bag_4bit_prepack, 2: Q.embedding_bag_2bit_prepack}
    return prepack[bits](weight)


@pytest.mark.parametrize("call, message", [
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([[1, 2]]), torch.tensor([0])), "2-D"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 2])), "offsets"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 2]), torch.tensor([0]), 
                                                       pruned_weights=True), "compressed_indices_mapping"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 2]), torch.tensor([0]),
                                                       pruned_weights=True,
                                                       compressed_indices_mapping=torch.arange(20)), "int32"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 2]), torch.tensor([0]), mode=1,
                                                       per_sample_weights=torch.ones(2)), "per_sample_weights"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 2]), torch.tensor([0]),
                                                       per_sample_weights=torch.ones(1)), "per_sample_weights"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w, torch.tensor([1, 20]), torch.tensor([0])), "20"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w.float(), torch.tensor([1]), torch.tensor([0])), "uint8"),
    (lambda q, w: q.embedding_bag_byte_rowwise_offsets(w[:, :5], torch.tensor([1]), torch.tensor([0])), "bytes"),
    (lambda q, w: q.embedding_bag(w, 3, torch.tensor([1]), torch.tensor([0])), "bits"),
    (lambda q, w: q.embedding_bag(w, 8, torch.tensor([1]), torch.tensor([0]), dim=9), "dim"),
])
def test_rowwise_calls_reject_bad_arguments(sj, call, message):
    with pytest.raises(RuntimeError) as info:
        call(sj.quantized, packed_table(8))
    assert message in str(info.value), str(info.value)


def test_lengths_reading_does_not_check_positions_it_never_reads(sj):
    weight = packed_table(8, rows=3, dim=4)
    args = (weight, torch.tensor([0, 1, 99]), torch.tensor([0, 2]), False, 0, False, None, None, True)
    assert_same_tensor(sj.quantized.embedding_bag_byte_rowwise_offsets(*args),
                       Q.embedding_bag_byte_rowwise_offsets(*args), "trailing unread index")


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_padding_idx_keyword_drops_the_padding_row(sj, bits):
    weight = packed_table(bits, dim=16)
    name = {8: "byte", 4: "4bit", 2: "2bit"}[bits]
    ours = getattr(sj.quantized, "embedding_bag_{}_rowwise_offsets".format(name))
    theirs = getattr(Q, "embedding_bag_{}_rowwise_offsets".format(name))
    indices, offsets = torch.tensor([3, 5, 3, 7, 3]), torch.tensor([0, 2, 4])
    expected = theirs(weight, torch.tensor([5, 7]), torch.tensor([0, 1, 2]))  # the last bag empty
    assert_same_tensor(ours(weight, indices, offsets, padding_idx=3), expected, "padding_idx")
    assert_same_tensor(ours(weight, indices, offsets, mode=1, padding_idx=-17), ours(weight, indices, offsets,
                                                                                    mode=1, padding_idx=3),
                       "negative padding_idx")


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_explicit_dim_reads_rows_with_trailing_bytes(sj, bits):
    """Rows wider than their packed size (here 3 spare bytes each): `dim` says how many values
    they hold, where the width alone would suggest more."""
    weight = packed_table(bits, dim=8)
    padded = torch.cat([weight, torch.full((weight.shape[0], 3), 0xAB, dtype=torch.uint8)], 1)
    indices, offsets = torch.tensor([1, 2, 3, 9, 2]), torch.tensor([0, 1])
    for mode in (0, 1, 2):
        expected = sj.quantized.embedding_bag(weight, bits, indices, offsets, mode)
        actual = sj.quantized.embedding_bag(padded, bits, indices, offsets, mode, dim=8)
        for a, e, name in zip(actual, expected, ("output", "offset2bag", "bag_size", "max_indices")):
            assert_same_tensor(a, e, "mode {} {} with 3 spare bytes a row".format(mode, name))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_output_dtypes_round_the_f32_result_once(sj, dtype):
    weight = packed_table(8, dim=24, seed=3)
    indices, offsets = torch.randint(0, 20, (50,), generator=torch.Generator().manual_seed(1)), torch.tensor([0, 7, 7])
    for mode in ("sum", "mean", "max"):
        f32 = sj.quantized.embedding_bag(weight, 8, indices, offsets, mode)
        low = sj.quantized.embedding_bag(weight, 8, indices, offsets, mode, output_dtype=dtype)
        assert_same_tensor(low[0], f32[0].to(dtype), "{} output {}".format(mode, dtype))
        for a, e, name in zip(low[1:], f32[1:], ("offset2bag", "bag_size", "max_indices")):
            assert_same_tensor(a, e, "{} {}".format(mode, name))


def test_quantized_module_from_float_keeps_mode_and_state(sj, seed):
    g = random.Random(seed)
    float_module = torch.nn.EmbeddingBag(30, 12, mode="max", include_last_offset=True)
    for bits in (8, 4, 2):
        module = sj.QuantizedEmbeddingBag.from_float(float_module, bits)
        assert (module.num_embeddings, module.embedding_dim, module.mode, module.bits) == (30, 12, "max", bits)
        indices = torch.tensor([g.randrange(30) for _ in range(20)])
        offsets = torch.tensor([0, 4, 4, 20])
        expected = sj.quantized.embedding_bag(module.packed_weight, bits, indices, offsets, "max",
                                              include_last_offset=True)[0]
        assert_same_tensor(module(indices, offsets), expected, "{}-bit max module".format(bits))
        clone = sj.QuantizedEmbeddingBag(torch.zeros_like(module.packed_weight), bits, "max", True)
        clone.load_state_dict(module.state_dict())
        assert_same_tensor(clone(indices, offsets), expected, "{}-bit module from its state_dict".format(bits))


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_output_only_op_equals_the_full_op_output(sj, seed, bits):
    """quantized_embedding_bag_output (what the rowwise functions and the module call) skips the
    index results; its output is the full op's, bitwise, in every mode, with padding, pruning,
    weights, lengths-style offsets and threaded calls."""
    g = random.Random(seed * 3 + bits)
    gen = torch.Generator().manual_seed(seed + bits)
    for case in range(40):
        dim = g.choice([4, 8, 12, 16, 36, 64, 128])
        rows = g.randint(1, 60)
        weight = packed_table(bits, dim=dim, rows=rows, seed=case)
        n = g.choice([0, 1, 7, 40, 3000])
        indices = torch.randint(0, rows, (n,), generator=gen)
        cuts = sorted(g.randint(0, n) for _ in range(g.randint(1, 12)))
        include_last_offset, as_lengths = g.random() < 0.3, g.random() < 0.3
        offsets = torch.tensor([0] + cuts + ([n] if include_last_offset else []))
        mode = g.choice([0, 1, 2])
        psw = torch.rand(n, generator=gen) if mode == 0 and g.random() < 0.4 else None
        padding_idx = g.randrange(rows) if g.random() < 0.3 else None
        mapping = None
        if g.random() < 0.3:
            mapping = torch.randint(-1, rows, (rows,), generator=gen, dtype=torch.int32)
        args = (weight, bits, indices, offsets, mode, psw, padding_idx, include_last_offset, mapping, as_lengths,
                torch.float32, None)
        full = torch.ops.shapejit.quantized_embedding_bag(*args)
        only = torch.ops.shapejit.quantized_embedding_bag_output(*args)
        assert_same_tensor(only, full[0], "case {} (bits {}, mode {}, D {}, N {})".format(case, bits, mode, dim, n))
