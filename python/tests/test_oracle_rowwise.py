"""Oracle families for rowwise-quantized tables (docs/quantized-tables-semantics.md, B3/B4):
shapejit.quantized.embedding_bag_{byte,4bit,2bit}_rowwise_offsets against torch 1.13's ops in
mode 0, bit for bit, over torch's own argument rules: offsets read as bag lengths (offsets[0] may
be nonzero, decreasing offsets are empty bags, trailing positions past include_last_offset's end
ignored), 2-D indices, mixed index dtypes, f32 psw (f16 too for 4/2-bit, any shape of N values),
pruned tables, the one-element-0 mapping, ignored arguments. Where torch raises, shapejit must too."""
import pytest

from oracle import Outcome, compare, describe, run_family, single_threaded_torch
from rowwise_cases import NAME, ROWWISE, Call, Table


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
        expected = Outcome(lambda: ROWWISE[bits](*args))
        actual = Outcome(lambda: ours(*args))
        text = "{}; {}\n  indices={}\n  offsets={}\n  psw={}\n  mapping={}".format(
            table, call, describe(indices), describe(offsets), describe(psw), describe(mapping))
        compare(family, case_seed, text, actual, expected, ("output",))
        return expected.error is None

    run_family(family, make_case, count=2400, min_accepted=0.84)  # >= 2,000 cases torch accepts


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_rowwise_offsets_mode0_match_torch(sj, bits):
    check_family(sj, bits)
