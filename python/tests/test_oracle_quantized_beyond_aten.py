"""What shapejit adds to torch for quantized tables (docs/quantized-tables-semantics.md, "Beyond
ATen"): all four results, mean and max, padding_idx, f16/bf16 output, checked on random cases
against references built from torch's own ops:
- sum: torch's rowwise op (padding positions removed by a pruning map that sends the padding
  index to -1);
- mean: that sum divided in f32 by max(count, 1), count = positions neither padding nor pruned;
- max, offset2bag, bag_size, max_indices: torch.embedding_bag (f32) over the dequantized rows
  (torch's rowwise op with one-row bags, i.e. the no-bag lookup), pruned and padding positions
  sent to an extra padding row;
- f16 / bf16 output: the f32 result rounded once.
Offsets are bag starts (the f32 rules), so the rowwise functions' lengths reading agrees."""
import pytest
import torch

from oracle import Outcome, compare, describe, run_family, single_threaded_torch
from rowwise_cases import NAME, ROWWISE, Table, psw_values, random_mapping

NAMES = ("output", "offset2bag", "bag_size", "max_indices")


@pytest.fixture(autouse=True)
def one_thread():
    restore = single_threaded_torch()
    yield
    restore()


def dequantized_rows(bits, weight):
    """Each row as the no-bag lookup gives it: torch's rowwise op over one-row bags."""
    n = weight.shape[0]
    return ROWWISE[bits](weight, torch.arange(n), torch.arange(n))


def reference(bits, weight, indices, offsets, mode, psw, padding_idx, include_last_offset, mapping):
    """The four f32 results by the rules above."""
    n = weight.shape[0]
    index_range = n if mapping is None else mapping.numel()
    row_of_index = torch.arange(n, dtype=torch.int32) if mapping is None else mapping.clone()
    skip_map = row_of_index.clone()
    if padding_idx is not None:
        skip_map[padding_idx % index_range] = -1
    sum_map = None if mapping is None and padding_idx is None else skip_map
    total = ROWWISE[bits](weight, indices, offsets, False, 0, sum_map is not None, psw, sum_map, include_last_offset)

    table = torch.cat([dequantized_rows(bits, weight)[row_of_index.long().clamp(min=0)],
                       torch.zeros(1, weight_dim(bits, weight))])
    pad_row = index_range
    skipped = skip_map[indices.long()] == -1
    proxy_indices = torch.where(skipped, torch.full_like(indices, pad_row), indices)
    out, offset2bag, bag_size, max_indices = torch.embedding_bag(table, proxy_indices, offsets, False, mode, False,
                                                                 None, include_last_offset, pad_row)
    if mode == 0:
        out = total
        if padding_idx is None:  # the f32 rules: sum mode fills offset2bag only with a padding_idx
            offset2bag = offset2bag.new_empty(0)
    elif mode == 1:
        out = total / bag_size.clamp(min=1).to(torch.float32).unsqueeze(1)
    return out, offset2bag, bag_size, max_indices


def weight_dim(bits, weight):
    return (weight.shape[1] - (8 if bits == 8 else 4)) * (8 // bits)


def check_family(sj, bits):
    family = "rowwise_{}_beyond_aten".format(NAME[bits])
    rowwise = getattr(sj.quantized, "embedding_bag_{}_rowwise_offsets".format(NAME[bits]))

    def make_case(g, case_seed):
        table = Table(g, bits)
        weight = table.build()
        gen = torch.Generator().manual_seed(g.randrange(1 << 31))
        mode = g.choice([0, 1, 2])
        mapping = random_mapping(g, gen, table.rows) if g.random() < 0.3 else None
        index_range = table.rows if mapping is None else mapping.numel()
        n = g.choice([0, 1, 5, 40, 300])
        indices = torch.randint(0, index_range, (n,), generator=gen).to(g.choice([torch.int32, torch.int64]))
        padding_idx = None
        if g.random() < 0.35:
            padding_idx = g.randrange(0 if mapping is not None else -index_range, index_range)
            if n:
                indices[torch.rand(n, generator=gen) < 0.3] = padding_idx % index_range
        include_last_offset = g.random() < 0.3
        cuts = sorted(g.randrange(0, n + 1) for _ in range(g.choice([1, 2, 3, 17, 64]) - 1))
        offsets = torch.tensor([0] + cuts + ([n] if include_last_offset else []),
                               dtype=g.choice([torch.int32, torch.int64]))
        psw = None
        if mode == 0 and g.random() < 0.5:
            psw = psw_values(gen, n, g.choice([torch.float32] + ([torch.float16] if bits != 8 else [])), False)
        out_dtype = g.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16])
        text = "{}; mode={} indices={} offsets={} psw={} padding_idx={} include_last_offset={} mapping={} " \
               "output_dtype={}".format(table, mode, describe(indices), describe(offsets), describe(psw), padding_idx,
                                        include_last_offset, describe(mapping), out_dtype)

        def expected_results():
            results = reference(bits, weight, indices, offsets, mode, psw, padding_idx, include_last_offset, mapping)
            return (results[0].to(out_dtype),) + tuple(results[1:])

        expected = Outcome(expected_results)
        actual = Outcome(lambda: sj.quantized.embedding_bag(weight, bits, indices, offsets, mode, psw, padding_idx,
                                                            include_last_offset, mapping, out_dtype))
        compare(family, case_seed, text, actual, expected, NAMES)
        # The torch-signature function: same output (f32), offsets read as lengths (equal here).
        if expected.error is None:
            pruned = mapping is not None
            actual = Outcome(lambda: rowwise(weight, indices, offsets, False, mode, pruned, psw, mapping,
                                             include_last_offset, padding_idx=padding_idx))
            expected = Outcome(lambda: reference(bits, weight, indices, offsets, mode, psw, padding_idx,
                                                 include_last_offset, mapping)[0])
            compare(family, case_seed, text + " (rowwise_offsets form)", actual, expected, ("output",))
        return expected.error is None

    run_family(family, make_case, count=700, min_accepted=1.0)


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_all_results_modes_padding_and_output_dtypes(sj, bits):
    check_family(sj, bits)
