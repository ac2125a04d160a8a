"""Random rowwise-quantized tables and bag calls for the oracle tests (packed rows as torch lays
them out: docs/quantized-tables-semantics.md, section 2), kept inside torch's 'Do not send'
list: offsets never empty, psw never shorter than N, mapping values in [-1, n), byte prepack
only of f32 rows with D > 0, nbit prepack only of 2-D input. Offsets on which torch 2.13 returns
unwritten memory (offsets_kind) are not sent to torch: shapejit must reject them."""
import torch

PREPACK = {8: torch.ops.quantized.embedding_bag_byte_prepack, 4: torch.ops.quantized.embedding_bag_4bit_prepack,
           2: torch.ops.quantized.embedding_bag_2bit_prepack}
ROWWISE = {8: torch.ops.quantized.embedding_bag_byte_rowwise_offsets,
           4: torch.ops.quantized.embedding_bag_4bit_rowwise_offsets,
           2: torch.ops.quantized.embedding_bag_2bit_rowwise_offsets}
NAME = {8: "byte", 4: "4bit", 2: "2bit"}
SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0)


class Table:
    """n packed rows of `dim` values at `bits` bits: torch-prepacked from random floats, or random
    codes with random scale and bias (ordinary, tiny, huge, or with NaN / inf / -0.0)."""

    def __init__(self, g, bits):
        per_byte = 8 // bits
        self.bits = bits
        self.rows = g.choice([1, 2, 7, 50, 300])
        dim = g.choice([1, 2, 3, 4, 7, 8, 16, 17, 31, 32, 33, 64, 100, 128, 300]) if g.random() < 0.97 else 0
        self.dim = -(-dim // per_byte) * per_byte
        self.kind = g.choice(["prepacked", "random"]) if self.dim > 0 else "random"
        self.qparams = g.choice(["ordinary", "ordinary", "tiny", "huge", "specials"])
        self.torch_seed = g.randrange(1 << 31)

    def build(self):
        gen = torch.Generator().manual_seed(self.torch_seed)
        if self.kind == "prepacked":
            magnitude = {"tiny": 1e-5, "huge": 1e4}.get(self.qparams, 1.0)
            return PREPACK[self.bits](torch.randn(self.rows, self.dim, generator=gen) * magnitude)
        codes = torch.randint(0, 256, (self.rows, self.dim * self.bits // 8), generator=gen, dtype=torch.uint8)
        scale = torch.rand(self.rows, generator=gen) * 0.1
        bias = torch.randn(self.rows, generator=gen)
        if self.qparams == "tiny":
            scale, bias = scale * (1e-30 if self.bits == 8 else 1e-4), bias * 1e-6
        elif self.qparams == "huge":
            scale, bias = scale * (1e35 if self.bits == 8 else 1e4), bias * (1e35 if self.bits == 8 else 6e4)
        elif self.qparams == "specials":
            for t in (scale, bias):
                picks = torch.randint(0, len(SPECIALS), (self.rows,), generator=gen)
                hit = torch.rand(self.rows, generator=gen) < 0.3
                t[hit] = torch.tensor(SPECIALS)[picks][hit]
        qparams = torch.stack([scale, bias], 1)
        if self.bits != 8:
            qparams = qparams.half()
        return torch.cat([codes, qparams.contiguous().view(torch.uint8)], 1)

    def __str__(self):
        return "{}-bit table rows={} dim={} kind={} qparams={} torch_seed={}".format(
            self.bits, self.rows, self.dim, self.kind, self.qparams, self.torch_seed)


def random_mapping(g, gen, rows):
    """A pruning map: m int32 entries in [-1, rows), about a quarter -1."""
    m = g.choice([1, 2, rows, 2 * rows + 1])
    mapping = torch.randint(0, rows, (m,), generator=gen, dtype=torch.int32)
    mapping[torch.rand(m, generator=gen) < 0.25] = -1
    return mapping


def offsets_kind(bits, offsets, n, include_last_offset, dim, mapping=None, pruned=False):
    """What torch 2.13 (FBGEMM) makes of these offsets (docs/quantized-tables-semantics.md, 3):
    'defined' where its result or its error is the rule to match; 'reject' where its kernel fails
    and torch lets it pass, leaving unwritten output memory or a reading of offsets as lengths
    (decreasing offsets, offsets outside [0, N], offsets[0] > 0 for a 4/2-bit or pruned 8-bit
    table, whose one kernel call reads bags from position 0): shapejit must raise
    and torch is not asked; 'differs' for the one documented difference (8-bit, D = 0,
    offsets[0] > 0, some position covered: torch's error check misreads the offsets and raises)."""
    if not offsets:
        return "defined"
    first, last = offsets[0], offsets[-1]
    if first < 0 or last > n or any(b < a for a, b in zip(offsets, offsets[1:])):
        return "reject"
    really_pruned = pruned and not (mapping.numel() == 1 and int(mapping[0]) == 0)
    if (bits != 8 or really_pruned) and first != 0:
        return "reject"
    end = last if include_last_offset else n
    if bits == 8 and dim == 0 and first > 0 and end > first:
        return "differs"
    return "defined"


def covered(offsets, n, include_last_offset):
    """The positions [start, end) the bags of defined offsets cover (torch reads no other)."""
    if not offsets:
        return 0, 0
    return offsets[0], offsets[-1] if include_last_offset else n


def psw_values(gen, n, dtype, specials):
    values = torch.randn(n, generator=gen) * 2
    if specials and n:
        values[torch.randint(0, n, (max(1, n // 10),), generator=gen)] = float("nan")
        values[torch.randint(0, n, (max(1, n // 10),), generator=gen)] = -0.0
    return values.to(dtype)


class Call:
    """One call of torch's rowwise_offsets argument list over `table`; str() prints its settings.
    `pruning` picks how a mapping is passed: 'none', 'ignored_mapping' (pruned_weights False),
    'one_zero' (torch's not-pruned map [0]) or 'pruned'."""

    PRUNING = ("none", "none", "ignored_mapping", "one_zero", "pruned", "pruned")

    def __init__(self, g, table, pruning=PRUNING):
        self.index_dtype = g.choice([torch.int32, torch.int64])
        self.offset_dtype = g.choice([torch.int32, torch.int64])
        self.num_indices = g.choice([0, 1, 5, 40, 300])
        self.two_d = g.random() < 0.15 and self.num_indices > 0
        self.include_last_offset = g.random() < 0.3
        self.pruning = g.choice(pruning)
        self.psw = g.choice([None, torch.float32, torch.float32] + ([torch.float16] if table.bits != 8 else []))
        if table.bits == 8 and g.random() < 0.02:
            self.psw = torch.float16  # torch rejects f16 weights on 8-bit tables: so must shapejit
        self.psw_shape = g.choice(["flat", "flat", "2d"])
        self.offsets_style = g.choice(["starts", "starts", "starts", "shifted", "shifted", "noise"])
        self.bad_index = g.random() < 0.02
        self.scale_grad_by_freq = g.random() < 0.2
        self.specials = g.random() < 0.2
        self.torch_seed = g.randrange(1 << 31)
        self.bag_len = g.choice([1, 2, 5, 20])
        self.bags = g.choice([1, 2, 3, 17, 64]) - (self.include_last_offset and g.random() < 0.1)

    def tensors(self, g, table):
        gen = torch.Generator().manual_seed(self.torch_seed)
        n = self.num_indices
        mapping, pruned, index_range = None, False, table.rows
        if self.pruning == "ignored_mapping":
            mapping = random_mapping(g, gen, table.rows)
        elif self.pruning == "one_zero":
            mapping, pruned = torch.zeros(1, dtype=torch.int32), True
        elif self.pruning == "pruned":
            mapping, pruned = random_mapping(g, gen, table.rows), True
            index_range = mapping.numel()
        indices = torch.randint(0, index_range, (n,), generator=gen)
        if self.two_d:
            indices = indices.reshape(-1, self.bag_len) if n % self.bag_len == 0 else indices.reshape(-1, 1)
            offsets, offset_list = None, list(range(0, n, indices.shape[1]))
        else:
            offset_list = self.offset_values(g)
            offsets = torch.tensor(offset_list, dtype=self.offset_dtype)
        self.offset_list = offset_list
        start, end = covered(offset_list, n, self.include_last_offset)
        if self.bad_index and 0 <= start < end <= n:  # where torch looks (not the positions it skips)
            indices.view(-1)[g.randrange(start, end)] = g.choice([-1, index_range])
        psw = None
        if self.psw is not None:
            psw = psw_values(gen, n, self.psw, self.specials)
            psw = psw.reshape(indices.shape) if self.two_d else psw
            if self.psw_shape == "2d" and n % 5 == 0 and n:
                psw = psw.reshape(5, -1)
        return indices.to(self.index_dtype), offsets, psw, mapping, pruned

    def offset_values(self, g):
        """Never empty. 'starts': 0 then sorted cuts (a partial end with include_last_offset now
        and then); 'shifted': sorted, the first possibly > 0; 'noise': any order, slightly out
        of range (torch may reject)."""
        n, count = self.num_indices, max(1, self.bags + self.include_last_offset)
        if self.offsets_style == "noise":
            return [g.randrange(-2, n + 3) for _ in range(count)]
        cuts = sorted(g.randrange(0, n + 1) for _ in range(count))
        if self.offsets_style == "starts":
            cuts[0] = 0
            if self.include_last_offset and count > 1 and g.random() < 0.8:
                cuts[-1] = n
        return cuts

    def __str__(self):
        return ("indices {}[{}] offsets {} two_d={} include_last_offset={} pruning={} psw={}/{} "
                "offsets_style={} bad_index={} scale_grad_by_freq={} specials={} torch_seed={}").format(
            self.index_dtype, self.num_indices, self.offset_dtype, self.two_d, self.include_last_offset,
            self.pruning, self.psw, self.psw_shape, self.offsets_style, self.bad_index, self.scale_grad_by_freq,
            self.specials, self.torch_seed)
