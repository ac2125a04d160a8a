"""Index and offset dtypes beyond int32/int64, as torch 2.13 takes them. torch.embedding_bag (and
so nn.EmbeddingBag and F.embedding_bag) converts indices and offsets to their promoted dtype and
then requires int32 or int64, so int8/int16/uint8/bool indices work with int32/int64 offsets and
the index results take the promoted dtype; torch's quantized embedding-bag ops promote nothing.
Every pair is run through torch and shapejit: both accept it with the same results, or both
refuse it (shapejit naming the dtypes and the rule)."""
import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same_tensor

DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.float32]
NAMES = ("output", "offset2bag", "bag_size", "max_indices")


def _torch_result(fn):
    try:
        return fn(), None
    except (RuntimeError, TypeError) as e:
        return None, e


def _values(dtype):
    # bool holds only 0 and 1: rows 1, 0, 1, 1; the others rows 1, 2, 3, 4 (every dtype holds them).
    return [1, 0, 1, 1] if dtype == torch.bool else [1, 2, 3, 4]


@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("index_dtype,offset_dtype", list(itertools.product(DTYPES, DTYPES[:5])))
def test_op_follows_torch_embedding_bag(sj, mode, index_dtype, offset_dtype):
    weight = torch.arange(30, dtype=torch.float32).reshape(10, 3)
    indices = torch.tensor(_values(index_dtype), dtype=index_dtype)
    offsets = torch.tensor([0, 2], dtype=offset_dtype)
    want, refused = _torch_result(lambda: torch.embedding_bag(weight, indices, offsets, False, mode))
    if refused is not None:
        with pytest.raises(RuntimeError, match=r"shapejit\.embedding_bag: indices \({}\) and offsets \({}\) promote to "
                           r"\w+, but torch\.embedding_bag takes indices and offsets whose promoted dtype is int32 or "
                           r"int64".format(_name(index_dtype), _name(offset_dtype))):
            torch.ops.shapejit.embedding_bag(weight, indices, offsets, False, mode)
        return
    got = torch.ops.shapejit.embedding_bag(weight, indices, offsets, False, mode)
    for name, g, w in zip(NAMES, got, want):  # all four, as test_embedding_bag_op compares them
        assert g.dtype == w.dtype, "{}: {} against torch's {}".format(name, g.dtype, w.dtype)
        assert_same_tensor(g, w, "{} for {} indices, {} offsets".format(name, index_dtype, offset_dtype))


def _name(dtype):
    return {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.float32: "Float"}[dtype]


@pytest.mark.parametrize("index_dtype", DTYPES)
def test_module_with_2d_indices_follows_nn_embedding_bag(sj, index_dtype):
    # 2-D input: F.embedding_bag makes the offsets of the indices' own dtype, so nothing is
    # promoted and only int32/int64 pass.
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum").requires_grad_(False)
    ours = sj.EmbeddingBag.from_torch(bag)
    indices = torch.tensor([_values(index_dtype)], dtype=index_dtype)
    want, refused = _torch_result(lambda: bag(indices))
    if refused is not None:
        with pytest.raises(RuntimeError, match=r"indices must be int32 or int64 \(2-D indices make offsets of their "
                                               r"own dtype\), but got {}".format(_name(index_dtype))):
            ours(indices)
        return
    assert_same_tensor(ours(indices), want, "2-D {} indices".format(index_dtype))


@pytest.mark.parametrize("index_dtype,offset_dtype", [(torch.int16, torch.int64), (torch.uint8, torch.int32),
                                                      (torch.bool, torch.int64), (torch.int16, torch.int16)])
def test_module_with_offsets_follows_nn_embedding_bag(sj, index_dtype, offset_dtype):
    bag = torch.nn.EmbeddingBag(10, 3, mode="mean").requires_grad_(False)
    ours = sj.EmbeddingBag.from_torch(bag)
    indices = torch.tensor(_values(index_dtype), dtype=index_dtype)
    offsets = torch.tensor([0, 1], dtype=offset_dtype)
    want, refused = _torch_result(lambda: bag(indices, offsets))
    if refused is not None:
        with pytest.raises(RuntimeError, match="promote to"):
            ours(indices, offsets)
        return
    assert_same_tensor(ours(indices, offsets), want, "{} indices, {} offsets".format(index_dtype, offset_dtype))


@pytest.mark.parametrize("index_dtype,offset_dtype", [(torch.int16, torch.int64), (torch.uint8, torch.int32),
                                                      (torch.int32, torch.int16), (torch.int32, torch.int64)])
def test_quantized_op_follows_torch_quantized_op(sj, index_dtype, offset_dtype):
    packed = torch.ops.quantized.embedding_bag_byte_prepack(torch.arange(80, dtype=torch.float32).reshape(10, 8))
    indices = torch.tensor([1, 2, 3], dtype=index_dtype)
    offsets = torch.tensor([0, 2], dtype=offset_dtype)
    want, refused = _torch_result(lambda: torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
        packed, indices, offsets, False, 0, False, None, None, False))
    ours = lambda: sj.quantized.embedding_bag_byte_rowwise_offsets(packed, indices, offsets)
    if refused is not None:
        bad = "indices" if index_dtype not in (torch.int32, torch.int64) else "offsets"
        got_dtype = index_dtype if bad == "indices" else offset_dtype
        with pytest.raises(RuntimeError, match=r"{} must be int32 or int64 \(torch's quantized embedding-bag ops "
                                               r"promote neither\), but got {}".format(bad, _name(got_dtype))):
            ours()
        return
    assert_same_tensor(ours(), want, "quantized, {} indices, {} offsets".format(index_dtype, offset_dtype))
