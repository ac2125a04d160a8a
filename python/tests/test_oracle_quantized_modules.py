"""Oracle family for torch.ao.nn.quantized.EmbeddingBag (docs/quantized-tables-semantics.md, B5):
shapejit.EmbeddingBag.from_torch(module) must return exactly what the module returns, for
modules made by from_float (8-bit and 4-bit qconfigs) and from per-channel float-qparams
tensors with arbitrary scales and zero points, whatever their include_last_offset,
pruned_weights and (ignored) mode, on torch's own argument rules."""
import pytest
import torch
import torch.ao.nn.quantized as nnq

from oracle import Outcome, compare, describe, replay_hint, run_family, single_threaded_torch
from rowwise_cases import Call, offsets_kind

CALLS_PER_MODULE = 8
QCONFIG = {8: torch.ao.quantization.float_qparams_weight_only_qconfig,
           4: torch.ao.quantization.float_qparams_weight_only_qconfig_4bit}
DTYPE = {8: torch.quint8, 4: torch.quint4x2}


@pytest.fixture(autouse=True)
def one_thread():
    restore = single_threaded_torch()
    yield
    restore()


class ModuleSpec:
    """A random quantized module; str() prints how to rebuild it."""

    def __init__(self, g, bits):
        self.bits = bits
        self.rows = g.choice([1, 2, 7, 50, 300])
        dim = g.choice([1, 2, 3, 8, 16, 17, 33, 64, 128])
        self.dim = dim + dim % 2 if bits == 4 else dim
        self.origin = g.choice(["from_float", "from_float", "qparams"])
        self.values = g.choice(["randn", "ties", "wide"])
        self.include_last_offset = g.random() < 0.3
        self.pruned_weights = g.random() < 0.3
        self.mode = g.choice(["sum", "mean", "max"])
        self.torch_seed = g.randrange(1 << 31)

    def build(self):
        gen = torch.Generator().manual_seed(self.torch_seed)
        weight = torch.randn(self.rows, self.dim, generator=gen)
        if self.values == "ties":
            weight = weight.round()  # repeated minima and maxima, zero rows
        elif self.values == "wide":
            weight = weight * torch.logspace(-6, 6, self.rows).unsqueeze(1)
        if self.origin == "from_float":
            float_module = torch.nn.EmbeddingBag(self.rows, self.dim, mode="sum", _weight=weight)
            float_module.qconfig = QCONFIG[self.bits]
            module = nnq.EmbeddingBag.from_float(float_module)
        else:
            module = nnq.EmbeddingBag(self.rows, self.dim, dtype=DTYPE[self.bits])
            scales = torch.rand(self.rows, generator=gen) * 0.5 + 1e-3
            zero_points = torch.randn(self.rows, generator=gen) * 50
            module.set_weight(torch.quantize_per_channel(weight, scales, zero_points, 0, DTYPE[self.bits]))
        module.include_last_offset = self.include_last_offset
        module.pruned_weights = self.pruned_weights
        module.mode = self.mode  # torch's forward never reads it
        return module

    def __str__(self):
        return ("{}-bit module rows={} dim={} origin={} values={} include_last_offset={} pruned_weights={} "
                "mode={} torch_seed={}").format(self.bits, self.rows, self.dim, self.origin, self.values,
                                                self.include_last_offset, self.pruned_weights, self.mode,
                                                self.torch_seed)


class ModuleTable:
    """What Call needs to know of the module's table."""

    def __init__(self, spec):
        self.bits, self.rows = spec.bits, spec.rows


def check_family(sj, bits):
    family = "nnq_EmbeddingBag_{}bit".format(bits)
    state = {}

    def make_case(g, case_seed):
        # Every CALLS_PER_MODULE-th case builds a new module; the calls in between reuse it.
        if state.get("calls", CALLS_PER_MODULE) >= CALLS_PER_MODULE:
            spec = ModuleSpec(g, bits)
            theirs = spec.build()
            state.update(spec=spec, theirs=theirs, ours=sj.EmbeddingBag.from_torch(theirs), calls=0)
        state["calls"] += 1
        spec, theirs, ours = state["spec"], state["theirs"], state["ours"]
        table = ModuleTable(spec)
        pruning = ("one_zero", "pruned") if spec.pruned_weights else ("none", "ignored_mapping")
        call = Call(g, table, pruning)
        call.include_last_offset = spec.include_last_offset
        indices, offsets, psw, mapping, pruned = call.tensors(g, table)
        text = "{}; {}\n  indices={}\n  offsets={}\n  psw={}\n  mapping={}".format(
            spec, call, describe(indices), describe(offsets), describe(psw), describe(mapping))
        kind = offsets_kind(bits, call.offset_list, call.num_indices, call.include_last_offset, spec.dim, mapping,
                            pruned)
        with torch.no_grad():
            actual = Outcome(lambda: ours(indices, offsets, psw, mapping))
            if kind == "reject":  # torch 2.13 leaves output unwritten: not asked
                assert actual.error is not None, "{}\n  case: {}\n  shapejit must raise, but returned a result".format(
                    replay_hint(family, case_seed), text)
                return False
            bags = len(call.offset_list) - call.include_last_offset
            if kind == "differs" or (bits == 8 and psw is not None and psw.dtype != torch.float32 and bags <= 0):
                return False  # documented differences: torch reads the weights' type only inside a bag
            expected = Outcome(lambda: theirs(indices, offsets, psw, mapping))
        compare(family, case_seed, text, actual, expected, ("output",))
        return expected.error is None

    # About a third of the cases check rejections: 3,200 cases keep >= 2,000 that torch accepts.
    run_family(family, make_case, count=3200, min_accepted=0.625)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_modules_from_torch_match(sj, bits):
    check_family(sj, bits)


def test_odd_dim_quint4x2_module_is_rejected(sj):
    module = nnq.EmbeddingBag(5, 7, dtype=torch.quint4x2)
    with pytest.raises(ValueError, match="odd"):
        sj.EmbeddingBag.from_torch(module)


def test_from_torch_takes_the_module_settings(sj):
    module = nnq.EmbeddingBag(10, 6, dtype=torch.quint8, include_last_offset=True, mode="max")
    ours = sj.EmbeddingBag.from_torch(module)
    assert isinstance(ours, sj.QuantizedEmbeddingBag)
    assert (ours.bits, ours.num_embeddings, ours.embedding_dim) == (8, 10, 6)
    assert ours.include_last_offset and ours.mode == "sum" and not ours.pruned_weights
    assert ours.packed_weight.dtype == torch.uint8 and ours.packed_weight.shape == (10, 14)
    assert set(ours.state_dict()) == {"packed_weight"}


@pytest.mark.parametrize("bits", [8, 4])
def test_rebuilt_rows_are_the_rows_torch_computes_with(sj, bits):
    """Engine-independent: torch's own rowwise op over the rebuilt rows equals the module."""
    from shapejit.modules import rows_of_quantized_module
    op = torch.ops.quantized.embedding_bag_byte_rowwise_offsets if bits == 8 else \
        torch.ops.quantized.embedding_bag_4bit_rowwise_offsets

    def make_case(g, case_seed):
        spec = ModuleSpec(g, bits)
        spec.include_last_offset = spec.pruned_weights = False
        module = spec.build()
        indices = torch.arange(spec.rows)  # every row once, one bag each
        with torch.no_grad():
            expected = Outcome(lambda: module(indices, indices))
        actual = Outcome(lambda: op(rows_of_quantized_module(module), indices, indices))
        compare("nnq_rows_rebuilt_{}bit".format(bits), case_seed, str(spec), actual, expected, ("output",))
        return True

    run_family("nnq_rows_rebuilt_{}bit".format(bits), make_case, count=300)
