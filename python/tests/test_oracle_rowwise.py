"""Oracle families for rowwise-quantized tables (docs/quantized-tables-semantics.md, 3 and 4):
shapejit.quantized.embedding_bag_{byte,4bit,2bit}_rowwise_offsets against torch 2.13's (FBGEMM's)
ops in mode 0, bit for bit, over torch's own argument rules: offsets as bag starts (8-bit: the
first may be > 0, and with include_last_offset the last < N; 4/2-bit: neither), 2-D indices,
mixed index dtypes, f32 psw (f16 too for 4/2-bit, any shape of N values), pruned tables, the
one-element-0 mapping, ignored arguments. Where torch raises, shapejit must too; where torch 2.13
returns unwritten memory (offsets_kind 'reject'), shapejit must raise and torch is not asked."""
import pytest
import torch

from oracle import Outcome, compare, describe, replay_hint, run_family, single_threaded_torch
from rowwise_cases import NAME, ROWWISE, Call, Table, offsets_kind


@pytest.fixture(autouse=True)
def one_thread():
    restore = single_threaded_torch()
    yield
    restore()


def check_family(sj, bits):
    family = "rowwise_{}_mode0".format(NAME[bits])
    ours = getattr(sj.quantized, "embedding_bag_{}_rowwise_offsets".format(NAME[bits]))

    def make_case(g, case_seed):
        table = Table(g, bits)
        call = Call(g, table)
        weight = table.build()
        indices, offsets, psw, mapping, pruned = call.tensors(g, table)
        args = (weight, indices, offsets, call.scale_grad_by_freq, 0, pruned, psw, mapping, call.include_last_offset)
        text = "{}; {}\n  indices={}\n  offsets={}\n  psw={}\n  mapping={}".format(
            table, call, describe(indices), describe(offsets), describe(psw), describe(mapping))
        kind = offsets_kind(bits, call.offset_list, call.num_indices, call.include_last_offset, table.dim, mapping, pruned)
        actual = Outcome(lambda: ours(*args))
        if kind == "reject":
            assert actual.error is not None, "{}\n  case: {}\n  torch 2.13 leaves output unwritten: shapejit " \
                "must raise, but returned a result".format(replay_hint(family, case_seed), text)
            return False
        bags = len(call.offset_list) - call.include_last_offset
        if bits == 8 and psw is not None and psw.dtype != torch.float32 and bags <= 0:
            kind = "differs"  # torch reads the weights' type only inside a bag (documented difference)
        if kind == "differs":
            return False
        expected = Outcome(lambda: ROWWISE[bits](*args))
        compare(family, case_seed, text, actual, expected, ("output",))
        return expected.error is None

    # About a third of the cases check rejections (errors torch raises, offsets torch 2.13 leaves
    # undefined): 3,200 cases keep >= 2,000 that torch accepts.
    run_family(family, make_case, count=3200, min_accepted=0.625)


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_rowwise_offsets_mode0_match_torch(sj, bits):
    check_family(sj, bits)


def _packed_rows(bits, rows):
    """Packed rows of 4 columns: (code of every column, scale, bias) each; f32 scale and bias
    for 8-bit, f16 for 4/2-bit."""
    out = []
    for code, scale, bias in rows:
        if bits == 8:
            codes = torch.full((4,), code, dtype=torch.uint8)
            trailer = torch.tensor([scale, bias], dtype=torch.float32).view(torch.uint8)
        else:
            per_byte = 8 // bits
            byte = sum(code << (bits * k) for k in range(per_byte))
            codes = torch.full((4 // per_byte,), byte, dtype=torch.uint8)
            trailer = torch.tensor([scale, bias], dtype=torch.float16).view(torch.uint8)
        out.append(torch.cat([codes, trailer]))
    return torch.stack(out)


# Random cases rarely land where torch 2.13's single fma and torch 1.13's double step differ;
# these do (docs/quantized-tables-semantics.md, section 4). Each bag: (bits, rows, indices,
# weights, the value fmaf gives, the value 1.13's double step gave).
WITNESSES = [
    (8, [(65, 16519105 * 2.0 ** -54, 1.0)], [0], None, 1.0000001192092896, 1.0),
    (4, [(14, 1.0, 0.0), (0, 0.0, 1.0)], [1, 0], [float.fromhex("0x1.d032p-68"), float.fromhex("0x1.2309acp+19")],
     float.fromhex("0x1.fd50eep+22"), float.fromhex("0x1.fd50ecp+22")),
    (2, [(3, 1.0, 0.0), (0, 0.0, 1.0)], [1, 0], [-2.0 ** -60, float.fromhex("0x1.c79504p+19")], None, None),
]


@pytest.mark.parametrize("witness", range(len(WITNESSES)))
def test_rounding_witnesses_match_torch(sj, witness):
    bits, rows, idx, weights, fmaf_value, double_value = WITNESSES[witness]
    packed = _packed_rows(bits, rows)
    args = (packed, torch.tensor(idx), torch.tensor([0]), False, 0, False,
            None if weights is None else torch.tensor(weights, dtype=torch.float32))
    expected = ROWWISE[bits](*args)
    actual = getattr(sj.quantized, "embedding_bag_{}_rowwise_offsets".format(NAME[bits]))(*args)
    assert torch.equal(actual.view(torch.int32), expected.view(torch.int32)), (actual, expected)
    if fmaf_value is not None:
        assert expected[0, 0].item() == fmaf_value and fmaf_value != double_value
