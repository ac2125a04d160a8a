"""shapejit.EmbeddingBagGroup and torch.ops.shapejit.embedding_bags_output: many bags in one engine
call give each bag's own output (bitwise that of its shapejit.EmbeddingBag), name the bag whose
arguments are wrong, and script."""
import random
import warnings

import pytest
import torch

from helpers import assert_same_tensor, replay


def random_bags(g, gen, count):
    """torch.nn.EmbeddingBag modules of random sizes, modes, paddings and table dtypes."""
    bags = []
    for _ in range(count):
        mode = g.choice(["sum", "mean", "max"])
        rows = g.randrange(1, 300)
        bag = torch.nn.EmbeddingBag(rows, g.choice([1, 3, 8, 16, 33, 64, 130]), mode=mode,
                                    include_last_offset=g.random() < 0.3,
                                    padding_idx=g.randrange(-rows, rows) if g.random() < 0.3 else None)
        with torch.no_grad():
            bag.weight.copy_(torch.randn(bag.weight.shape, generator=gen))
        bag.weight.requires_grad_(False)
        bags.append(bag.to(g.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16])))
    return bags


def random_inputs(g, gen, bag, bags=None):
    """input, offsets and per_sample_weights of one call of `bag` (1-D or 2-D form), of `bags`
    bags when given (for concatenation), else of a random number."""
    rows = bag.num_embeddings
    weighted = bag.mode == "sum" and g.random() < 0.4
    if not bag.include_last_offset and g.random() < 0.3:
        inp = torch.randint(0, rows, (bags or g.randrange(1, 40), g.randrange(1, 9)), generator=gen)
        return inp, None, torch.randn(inp.shape, generator=gen).to(bag.weight.dtype) if weighted else None
    n = g.randrange(0, 2000 if g.random() < 0.3 else 80)  # some calls large enough to split
    inp = torch.randint(0, rows, (n,), generator=gen)
    cuts = sorted(g.randrange(0, n + 1) for _ in range(bags - 1 if bags else g.randrange(0, 40)))
    offsets = torch.tensor([0] + cuts + ([n] if bag.include_last_offset else []))
    return inp, offsets, torch.randn(n, generator=gen).to(bag.weight.dtype) if weighted else None


@pytest.mark.parametrize("threads", [1, 2])
def test_each_output_is_the_bags_own(sj, seed, threads):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trial in range(25):
            bags = random_bags(g, gen, g.randrange(1, 7))
            calls = [random_inputs(g, gen, bag) for bag in bags]
            group = sj.EmbeddingBagGroup(bags)
            outs = group([c[0] for c in calls], [c[1] for c in calls], [c[2] for c in calls])
            assert len(outs) == len(bags)
            for k, (bag, (inp, offsets, psw), out) in enumerate(zip(bags, calls, outs)):
                alone = sj.EmbeddingBag.from_torch(bag)(inp, offsets, psw)
                assert_same_tensor(out, alone, replay("trial {} bag {} ({}, {}, padding {}, last offset {})".format(
                    trial, k, bag.mode, bag.weight.dtype, bag.padding_idx, bag.include_last_offset)))
    finally:
        torch.set_num_threads(before)


def test_f32_bags_equal_torch(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    bags = [torch.nn.EmbeddingBag(50, 16, mode=m, padding_idx=p) for m, p in
            (("sum", None), ("mean", 3), ("max", None), ("max", 7))]
    inputs = [torch.randint(0, 50, (30,), generator=gen) for _ in bags]
    offsets = [torch.tensor([0, 4, 4, 17]) for _ in bags]
    with torch.no_grad():
        outs = sj.EmbeddingBagGroup(bags)(inputs, offsets)
        for k, bag in enumerate(bags):
            assert_same_tensor(outs[k], bag(inputs[k], offsets[k]), replay("bag {} ({})".format(k, bag.mode)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_op_follows_torch_on_strided_tables_and_weights(sj, seed, dtype):
    """torch runs ATen's own loop (products rounded first; bf16 sums to nearest even) for a
    column-strided table or strided weights: the group op's tables do as torch.embedding_bag does
    on the same tensors, dense or strided, table by table."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 50, (40,), generator=gen)
    off = torch.tensor([0, 7, 19, 33])
    layouts_differ = 0
    for trial in range(20):
        if dtype == torch.float32:  # the paths differ by the rounding of products
            strided = (torch.randn(17, 50, generator=gen) * 1e3).t()
            psw = torch.randn(80, generator=gen)[::2]
        else:  # bf16 products are exact: the paths differ where a sum ties (half up vs to even)
            strided = torch.randint(-300, 300, (17, 50), generator=gen).to(dtype).t()
            psw = torch.tensor([0.5, 1.0, 2.0, -1.0])[torch.randint(0, 4, (80,), generator=gen)].to(dtype)[::2]
        tables = [strided, strided.contiguous(), strided]
        weights = [psw.contiguous(), psw, psw]
        got = torch.ops.shapejit.table_bags_output(tables, [0] * 3, [idx] * 3, [off] * 3, [0] * 3, weights,
                                                   [False] * 3, [None] * 3, [None] * 3)
        for k in range(3):
            want = torch.embedding_bag(tables[k], idx, off, False, 0, False, weights[k])[0]
            assert_same_tensor(got[k], want, replay("trial {} table {} ({})".format(trial, k, dtype)))
        dense = torch.embedding_bag(strided.contiguous(), idx, off, False, 0, False, psw.contiguous())[0]
        layouts_differ += int(not torch.equal(dense, got[0]))
    assert layouts_differ > 0, replay("torch's two paths never differed: the test cannot tell them apart")


def test_errors_name_the_bag(sj):
    bags = [torch.nn.EmbeddingBag(10, 4), torch.nn.EmbeddingBag(20, 4, mode="max")]
    group = sj.EmbeddingBagGroup(bags)
    good = [torch.tensor([1, 2]), torch.tensor([3, 4])]
    offs = [torch.tensor([0]), torch.tensor([0])]
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"table_bags_output: bags\[1\]: indices\[1\] = 20 is out of range"):
            group([good[0], torch.tensor([3, 20])], offs)
        with pytest.raises(NotImplementedError, match=r"bags\[1\]: per_sample_weights need mode 'sum'"):
            group(good, offs, [None, torch.ones(2)])
        with pytest.raises(ValueError, match=r"bags\[0\]: 1-D input needs offsets"):
            group(good, [None, offs[1]])
        with pytest.raises(ValueError, match="2 bags but 1 inputs"):
            group(good[:1], offs)
        bags[1].max_norm = 1.0
        with pytest.raises(NotImplementedError, match=r"bags\[1\]: max_norm must be None"):
            group(good, offs)
    with pytest.raises(TypeError, match=r"bags\[1\] must be a torch.nn.EmbeddingBag"):
        sj.EmbeddingBagGroup([bags[0], torch.nn.Linear(2, 2)])
    w = torch.randn(10, 4)
    with pytest.raises(RuntimeError, match="modes has 1 entries but weights has 2"):
        torch.ops.shapejit.embedding_bags_output([w, w], good, offs, [0], [None, None], [False, False], [None, None])


def test_gradient_reaches_a_weight_that_wants_it(sj):
    """A bag's weight requiring grad gets torch's gradient (test_autograd.py compares many cases)."""
    bag = torch.nn.EmbeddingBag(10, 4)
    ref = torch.nn.EmbeddingBag(10, 4, _weight=bag.weight.detach().clone())
    group = sj.EmbeddingBagGroup([bag])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = group([torch.tensor([1, 1, 7])], [torch.tensor([0, 1])])
    out.sum().backward()
    ref(torch.tensor([1, 1, 7]), torch.tensor([0, 1])).sum().backward()
    assert torch.equal(bag.weight.grad, ref.weight.grad)


def test_scripted_group_equals_eager(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    bags = [torch.nn.EmbeddingBag(40, 8, mode="mean"), torch.nn.EmbeddingBag(30, 5, mode="max", padding_idx=2)]
    group = sj.EmbeddingBagGroup(bags)
    inputs = [torch.randint(0, 40, (12,), generator=gen), torch.randint(0, 30, (3, 4), generator=gen)]
    offsets = [torch.tensor([0, 5]), None]
    with torch.no_grad():
        eager = group(inputs, offsets)
        scripted = torch.jit.script(group)(inputs, offsets)
    for k in range(2):
        assert_same_tensor(scripted[k], eager[k], "scripted bag {}".format(k))


@pytest.mark.parametrize("threads", [1, 2])
def test_concat_is_torch_cat_of_the_outputs(sj, seed, threads):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trial in range(20):
            dtype = g.choice([torch.float32, torch.float16, torch.bfloat16])
            bags = [b.to(dtype) for b in random_bags(g, gen, g.randrange(1, 7))]
            count = g.randrange(1, 60)
            calls = [random_inputs(g, gen, bag, count) for bag in bags]
            group = sj.EmbeddingBagGroup(bags)
            args = ([c[0] for c in calls], [c[1] for c in calls], [c[2] for c in calls])
            got = group.concat(*args)
            want = torch.cat(group(*args), dim=1)
            assert got.shape == (count, sum(b.embedding_dim for b in bags)) and got.is_contiguous()
            assert_same_tensor(got, want, replay("trial {} ({} bags of {})".format(trial, len(bags), dtype)))
    finally:
        torch.set_num_threads(before)


def test_concat_needs_one_bag_count_and_dtype(sj):
    bags = [torch.nn.EmbeddingBag(10, 4), torch.nn.EmbeddingBag(20, 3, mode="max")]
    group = sj.EmbeddingBagGroup(bags)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"bags\[1\] has 3 bags but bags\[0\] has 2"):
            group.concat([torch.tensor([1, 2]), torch.tensor([3, 4])], [torch.tensor([0, 1]), torch.tensor([0, 1, 1])])
        with pytest.raises(RuntimeError, match=r"bags\[1\]'s output dtype Half differs from bags\[0\]'s Float"):
            sj.EmbeddingBagGroup([bags[0], bags[1].to(torch.float16)]).concat(
                [torch.tensor([[1, 2]]), torch.tensor([[3, 4]])])
        with pytest.raises(ValueError, match="no bags to concatenate"):
            sj.EmbeddingBagGroup([]).concat([])
        assert sj.EmbeddingBagGroup([])([]) == []
        with pytest.raises(RuntimeError, match=r": bags\[1\]: indices\[0\] = 20 is out of range"):
            group.concat([torch.tensor([[1, 2]]), torch.tensor([[20, 4]])])


def test_scripted_concat_equals_eager(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    bags = [torch.nn.EmbeddingBag(40, 8, mode="mean"), torch.nn.EmbeddingBag(30, 5, mode="max", padding_idx=2)]
    group = sj.EmbeddingBagGroup(bags)
    inputs = [torch.randint(0, 40, (12,), generator=gen), torch.randint(0, 30, (2, 4), generator=gen)]
    offsets = [torch.tensor([0, 5]), None]
    with torch.no_grad():
        assert_same_tensor(torch.jit.script(group).concat(inputs, offsets), group.concat(inputs, offsets), "scripted")


def random_quantized_bag(sj, g, gen):
    """A shapejit.QuantizedEmbeddingBag of random bits, mode and width, pruned now and then."""
    bits = g.choice([8, 4, 2])
    rows, dim = g.randrange(1, 200), g.choice([4, 8, 12, 32, 64, 100])
    float_bag = torch.nn.EmbeddingBag(rows, dim, mode=g.choice(["sum", "mean", "max"]))
    with torch.no_grad():
        float_bag.weight.copy_(torch.randn(float_bag.weight.shape, generator=gen))
    bag = sj.QuantizedEmbeddingBag.from_float(float_bag, bits)
    mapping = None
    if g.random() < 0.25:  # pruned: index i reads row mapping[i] (-1 skips)
        bag.pruned_weights = True
        mapping = torch.randint(-1, rows, (rows + 7,), generator=gen, dtype=torch.int32)
    return bag, mapping


def quantized_inputs(g, gen, bag, mapping, bags=None):
    """A call of a quantized bag as its forward takes it: offsets are bag lengths."""
    space = mapping.numel() if mapping is not None else bag.num_embeddings
    if g.random() < 0.3:
        return torch.randint(0, space, (bags or g.randrange(1, 30), g.randrange(1, 6)), generator=gen), None
    count = bags or g.randrange(1, 30)
    lengths = [g.randrange(0, 9) for _ in range(count)]
    offsets = torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(count)])
    return torch.randint(0, space, (sum(lengths),), generator=gen), offsets if bag.include_last_offset else offsets[:-1]


@pytest.mark.parametrize("threads", [1, 2])
def test_quantized_and_float_bags_in_one_group(sj, seed, threads):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trial in range(15):
            count = g.randrange(1, 40)
            bags, inputs, offsets, mappings = [], [], [], []
            for _ in range(g.randrange(1, 6)):
                if g.random() < 0.6:
                    bag, mapping = random_quantized_bag(sj, g, gen)
                    inp, off = quantized_inputs(g, gen, bag, mapping, count)
                else:
                    bag, mapping = random_bags(g, gen, 1)[0].to(torch.float32), None
                    inp, off, _ = random_inputs(g, gen, bag, count)
                bags.append(bag)
                inputs.append(inp)
                offsets.append(off)
                mappings.append(mapping)
            group = sj.EmbeddingBagGroup(bags)
            outs = group(inputs, offsets, None, mappings)
            alone = [bag(inp, off, None, m) if isinstance(bag, sj.QuantizedEmbeddingBag) else
                     sj.EmbeddingBag.from_torch(bag)(inp, off) for bag, inp, off, m in zip(bags, inputs, offsets, mappings)]
            for k, (out, want) in enumerate(zip(outs, alone)):
                assert_same_tensor(out, want, replay("trial {} bag {} ({})".format(trial, k, bags[k])))
            assert_same_tensor(group.concat(inputs, offsets, None, mappings), torch.cat(alone, dim=1),
                               replay("trial {} concatenated".format(trial)))
    finally:
        torch.set_num_threads(before)


def test_torch_quantized_bags_join_as_their_shapejit_modules(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    float_bag = torch.nn.EmbeddingBag(50, 16, mode="sum")
    source = torch.nn.EmbeddingBag(50, 16, mode="sum")
    with torch.no_grad():
        source.weight.copy_(torch.randn(50, 16, generator=gen))
    source.qconfig = torch.ao.quantization.float_qparams_weight_only_qconfig
    qbag = torch.ao.nn.quantized.EmbeddingBag.from_float(source)
    group = sj.EmbeddingBagGroup([float_bag, qbag])
    assert isinstance(group.quantized_bags[0], sj.QuantizedEmbeddingBag)
    idx = torch.randint(0, 50, (12,), generator=gen)
    offsets = torch.tensor([0, 5, 5])
    with torch.no_grad():
        outs = group([idx, idx], [offsets, offsets])
        assert_same_tensor(outs[1], qbag(idx, offsets), "torch's quantized module")
        assert_same_tensor(outs[0], float_bag(idx, offsets), "the float bag")


def test_scripted_mixed_group_equals_eager(sj, seed):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    qbag, _ = random_quantized_bag(sj, g, gen)
    qbag.pruned_weights = False
    group = sj.EmbeddingBagGroup([torch.nn.EmbeddingBag(30, 5, mode="max"), qbag])
    inputs = [torch.randint(0, 30, (3, 4), generator=gen), torch.randint(0, qbag.num_embeddings, (3, 2), generator=gen)]
    scripted = torch.jit.script(group)
    with torch.no_grad():
        for got, want in zip(scripted(inputs), group(inputs)):
            assert_same_tensor(got, want, "scripted")
        assert_same_tensor(scripted.concat(inputs), group.concat(inputs), "scripted concat")


def test_quantized_group_errors_name_the_bag(sj):
    w = torch.randn(10, 4)
    qbag = sj.QuantizedEmbeddingBag(sj.quantized.embedding_bag_byte_prepack(w), 8)
    group = sj.EmbeddingBagGroup([torch.nn.EmbeddingBag(10, 4), qbag])
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"bags\[1\]: offsets are required with 1-D indices"):
            group([torch.tensor([[1]]), torch.tensor([1, 2])])
        with pytest.raises(ValueError, match=r"bags\[0\]: a float table takes no compressed_indices_mapping"):
            group([torch.tensor([[1]]), torch.tensor([[1]])], None, None, [torch.tensor([0], dtype=torch.int32), None])
        with pytest.raises(RuntimeError, match=r": bags\[1\]: indices\[0\] = 10 is out of range"):
            group([torch.tensor([[1]]), torch.tensor([[10]])])


# Every kind of error a group call can meet, each made in bag 1 or 2 of [float16, float16, 8-bit]
# and named "bags[k]" whichever layer finds it: the module's argument building (ValueError,
# NotImplementedError), the op's argument checks (dtypes, before the engine sees the call) and
# the engine's validation and index checks.
GROUP_ERRORS = {
    "indices out of range (engine)": (dict(indices={1: [1, 99]}), RuntimeError, 1,
                                      r"indices\[1\] = 99 is out of range for a table of 10 rows"),
    "first offset not 0 (engine)": (dict(offsets={1: [1]}), RuntimeError, 1, r"offsets\[0\] has to be 0"),
    "last offset past the indices (engine)": (dict(offsets={1: [0, 5]}), RuntimeError, 1,
                                              r"offsets\[-1\] can not be greater than input's length 2"),
    "quantized index out of range (engine)": (dict(indices={2: [10]}), RuntimeError, 2, r"indices\[0\] = 10 is out"),
    "per_sample_weights of another dtype (op)": (
        dict(psw={1: torch.ones(2)}), RuntimeError, 1,
        r"per_sample_weights must have the weight's dtype Half, but got Float"),
    "quantized per_sample_weights float64 (op)": (dict(psw={2: torch.ones(1, dtype=torch.float64)}), RuntimeError,
                                                  2, r"per_sample_weights must be float32, float16 or bfloat16, but "
                                                     r"got Double"),
    "float indices (op)": (dict(indices={1: torch.tensor([1.0, 2.0])}), RuntimeError, 1,
                           r"indices \(Float\) and offsets \(Long\) promote to Float"),
    "int16 indices and offsets (op)": (dict(indices={1: torch.tensor([1, 2], dtype=torch.int16)},
                                            offsets={1: torch.tensor([0], dtype=torch.int16)}), RuntimeError, 1,
                                       r"indices \(Short\) and offsets \(Short\) promote to Short"),
    "quantized int16 indices (op)": (dict(indices={2: torch.tensor([1], dtype=torch.int16)}), RuntimeError, 2,
                                     r"indices must be int32 or int64 \(torch's quantized embedding-bag ops promote "
                                     r"neither\), but got Short"),
    "2-D offsets (module)": (dict(offsets={1: torch.tensor([[0]])}), ValueError, 1, r"1-D input needs offsets"),
    "per_sample_weights of another shape (module)": (dict(psw={1: torch.ones(3, dtype=torch.float16)}), ValueError, 1,
                                                     r"per_sample_weights must have the input's shape"),
}


@pytest.mark.parametrize("kind", list(GROUP_ERRORS))
def test_every_error_kind_names_the_bag(sj, kind):
    change, error, k, rule = GROUP_ERRORS[kind]
    w = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    bags = [torch.nn.EmbeddingBag.from_pretrained(w.half(), mode="sum"),
            torch.nn.EmbeddingBag.from_pretrained(w.half(), mode="sum"),
            sj.QuantizedEmbeddingBag(sj.quantized.embedding_bag_byte_prepack(w), 8)]
    group = sj.EmbeddingBagGroup(bags)
    as_tensor = lambda v: v if isinstance(v, torch.Tensor) else torch.tensor(v)
    # Unchanged: one bag [1, 2] in each float bag, one bag [1] in the quantized one; the call runs.
    default_indices, default_offsets = [[1, 2], [1, 2], [1]], [[0], [0], [0]]
    group([torch.tensor(v) for v in default_indices], [torch.tensor(v) for v in default_offsets])
    indices = [as_tensor(change.get("indices", {}).get(j, default_indices[j])) for j in range(3)]
    offsets = [as_tensor(change.get("offsets", {}).get(j, default_offsets[j])) for j in range(3)]
    psw = [change.get("psw", {}).get(j) for j in range(3)]
    with pytest.raises(error, match=r"bags\[{}\]: .*{}".format(k, rule)):
        group(indices, offsets, psw)
    if k < 2:  # concat: the float16 bags alone (the quantized bag's output is float32)
        with pytest.raises(error, match=r"bags\[{}\]: .*{}".format(k, rule)):
            sj.EmbeddingBagGroup(bags[:2]).concat(indices[:2], offsets[:2], psw[:2])
