"""Table-batched peers for torch_ops_bench.py --sections tbe: the DLRM benchmark's 26 tables
pooled into one [B, 26 x 64] block by
  - torch 2.13: F.embedding_bag per table (f32) and torch.ops.quantized.embedding_bag_*_rowwise_offsets
    per table (8/4/2-bit rows of torch's prepack), then torch.cat;
  - shapejit: one EmbeddingBagGroup.concat call (f32 tables, and the same prepacked rows);
  - fbgemm_gpu (fbgemm-gpu-cpu from PyPI): the CPU training TBE (SplitTableBatchedEmbeddingBagsCodegen,
    EmbeddingLocation.HOST / ComputeDevice.CPU) over f32 tables, and the inference TBE
    (IntNBitTableBatchedEmbeddingBagsCodegen) over fp16 / int8 / int4 / int2 rows.
fbgemm_gpu's rows hold an fp16 scale and bias at the row head, torch's prepack an f32 (8-bit) or
f16 (4/2-bit) scale and bias at the tail, computed by other rules: the quantized tables differ, so
each side is checked against its own dequantized table (F.embedding_bag in f64 within a
tolerance), shapejit also bitwise against torch's ops over the same rows. The fbgemm rows are
skipped with the reason when fbgemm_gpu cannot be imported."""
import torch
import torch.nn.functional as F

import shapejit
from bench_timing import time_min_median
from dlrm_bench import sparse_inputs, table_rows

PREPACK = {8: torch.ops.quantized.embedding_bag_byte_prepack, 4: torch.ops.quantized.embedding_bag_4bit_prepack,
           2: torch.ops.quantized.embedding_bag_2bit_prepack}
ROWWISE = {8: torch.ops.quantized.embedding_bag_byte_rowwise_offsets,
           4: torch.ops.quantized.embedding_bag_4bit_rowwise_offsets,
           2: torch.ops.quantized.embedding_bag_2bit_rowwise_offsets}
UNPACK = {8: shapejit.quantized.embedding_bag_byte_unpack, 4: shapejit.quantized.embedding_bag_4bit_unpack,
          2: shapejit.quantized.embedding_bag_2bit_unpack}


def import_fbgemm():
    """(the fbgemm_gpu names used here, None) or (None, why not)."""
    try:
        import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm.*)
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice, EmbeddingLocation
        from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
    except Exception as e:  # noqa: BLE001  (any import failure: skip the fbgemm rows, saying why)
        return None, "{}: {}".format(type(e).__name__, e)
    return dict(SparseType=SparseType, ComputeDevice=ComputeDevice, EmbeddingLocation=EmbeddingLocation,
                IntN=IntNBitTableBatchedEmbeddingBagsCodegen, Training=SplitTableBatchedEmbeddingBagsCodegen), None


def fbgemm_rows(table, bits):
    """(codes packed as fbgemm_gpu reads them, [n, 4] bytes of fp16 scale and bias, the f32 table
    they stand for): min/max per row, scale = (max - min) / (2^bits - 1) and bias = min in fp16."""
    lo, hi = table.min(1).values, table.max(1).values
    scale = ((hi - lo) / (2 ** bits - 1)).half()
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    bias = lo.half()
    codes = torch.round((table - bias.float()[:, None]) / scale.float()[:, None]).clamp(0, 2 ** bits - 1).to(torch.uint8)
    per_byte = 8 // bits
    packed = torch.zeros(table.shape[0], table.shape[1] // per_byte, dtype=torch.uint8)
    for k in range(per_byte):  # element per_byte*j + k in bits [k*bits, (k+1)*bits) of byte j
        packed |= codes[:, k::per_byte] << (k * bits)
    qparams = torch.stack([scale, bias], 1).contiguous().view(torch.uint8)
    dequantized = codes.float() * scale.float()[:, None] + bias.float()[:, None]
    return packed, qparams, dequantized


def reference(tables, indices, offsets):
    """The pooled sums in f64 and a tolerance (1e-5 of the sums of magnitudes, + 1e-6)."""
    sums, mags = [], []
    for t, i, o in zip(tables, indices, offsets):
        t = t.double()
        sums.append(F.embedding_bag(i, t, o, mode="sum"))
        mags.append(F.embedding_bag(i, t.abs(), o, mode="sum"))
    return torch.cat(sums, 1), torch.cat(mags, 1) * 1e-5 + 1e-6


def check_close(label, got, want):
    ref, tol = want
    bad = ((got.double() - ref).abs() > tol).sum().item()
    if bad:
        raise SystemExit("tbe: {}: {} of {} values differ from its own dequantized table's sums by more than "
                         "the tolerance".format(label, bad, got.numel()))


def build(rows, tables, indices, offsets, batch, fb):
    """[(label, zero-argument call, checked-against)] for every peer."""
    nn_bags = [torch.nn.EmbeddingBag.from_pretrained(t, mode="sum", freeze=True) for t in tables]
    flat_idx = torch.cat(indices)
    lengths = torch.cat([torch.diff(o, append=torch.tensor([i.numel()])) for i, o in zip(indices, offsets)])
    flat_off = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    flat_idx32, flat_off32 = flat_idx.int(), flat_off.int()
    f32_ref = reference(tables, indices, offsets)
    group = shapejit.EmbeddingBagGroup(nn_bags)
    peers = [("f32 torch F.embedding_bag x26 + cat",
              lambda: torch.cat([F.embedding_bag(i, t, o, mode="sum") for t, i, o in zip(tables, indices, offsets)], 1),
              f32_ref),
             ("f32 shapejit EmbeddingBagGroup.concat", lambda: group.concat(indices, offsets), f32_ref)]
    if fb is not None:
        dense = fb["Training"]([(n, 64, fb["EmbeddingLocation"].HOST, fb["ComputeDevice"].CPU) for n in rows],
                               device="cpu")
        for w, t in zip(dense.split_embedding_weights(), tables):
            w.copy_(t)
        peers.append(("f32 fbgemm_gpu SplitTableBatchedEmbeddingBagsCodegen (CPU)", lambda: dense(flat_idx, flat_off),
                      f32_ref))
        half = fb["IntN"]([("", n, 64, fb["SparseType"].FP16, fb["EmbeddingLocation"].HOST) for n in rows],
                          device="cpu", output_dtype=fb["SparseType"].FP32)
        half.initialize_weights()  # allocates the rows, filled below
        for (w, _), t in zip(half.split_embedding_weights(split_scale_shifts=True), tables):
            w.copy_(t.half().view(torch.uint8))
        peers.append(("fp16 fbgemm_gpu IntNBitTableBatchedEmbeddingBagsCodegen",
                      lambda: half(flat_idx32, flat_off32), reference([t.half().float() for t in tables], indices,
                                                                       offsets)))
    for bits in (8, 4, 2):
        packed = [PREPACK[bits](t) for t in tables]
        qgroup = shapejit.EmbeddingBagGroup([shapejit.QuantizedEmbeddingBag(p, bits) for p in packed])
        op = ROWWISE[bits]
        own_ref = reference([UNPACK[bits](p) for p in packed], indices, offsets)
        peers.append(("int{} torch.ops.quantized rowwise_offsets x26 + cat".format(bits),
                      lambda op=op, packed=packed: torch.cat(
                          [op(p, i, o) for p, i, o in zip(packed, indices, offsets)], 1), own_ref))
        peers.append(("int{} shapejit EmbeddingBagGroup.concat".format(bits),
                      lambda qgroup=qgroup: qgroup.concat(indices, offsets), own_ref))
        if fb is not None:
            sparse_type = {8: fb["SparseType"].INT8, 4: fb["SparseType"].INT4, 2: fb["SparseType"].INT2}[bits]
            tbe = fb["IntN"]([("", n, 64, sparse_type, fb["EmbeddingLocation"].HOST) for n in rows], device="cpu",
                             output_dtype=fb["SparseType"].FP32)
            tbe.initialize_weights()
            dequantized = []
            for (w, qp), t in zip(tbe.split_embedding_weights(split_scale_shifts=True), tables):
                codes, qparams, deq = fbgemm_rows(t, bits)
                w.copy_(codes)
                qp.copy_(qparams)
                dequantized.append(deq)
            peers.append(("int{} fbgemm_gpu IntNBitTableBatchedEmbeddingBagsCodegen".format(bits),
                          lambda tbe=tbe: tbe(flat_idx32, flat_off32), reference(dequantized, indices, offsets)))
    return peers


def run(args, gen):
    rows = table_rows(26, 1000, 200000, args.dlrm_max_mb << 20, 64, gen)
    tables = [torch.rand(n, 64, generator=gen) * 2 - 1 for n in rows]
    indices, offsets = sparse_inputs(rows, args.dlrm_batch, args.dlrm_len, gen)
    fb, why = import_fbgemm()
    if fb is None:
        print("tbe: fbgemm_gpu rows skipped: fbgemm_gpu cannot be imported ({})".format(why), flush=True)
    print("tbe: the dlrm tables (26, {}..{} rows, D=64), B={}, Poisson({}) lengths, sum pooling, f32 output".format(
        min(rows), max(rows), args.dlrm_batch, args.dlrm_len), flush=True)
    with torch.no_grad():
        peers = build(rows, tables, indices, offsets, args.dlrm_batch, fb)
        outputs = {}
        for label, fn, want in peers:
            outputs[label] = fn()
            check_close(label, outputs[label], want)
        for bits in (8, 4, 2):
            same = torch.equal(outputs["int{} torch.ops.quantized rowwise_offsets x26 + cat".format(bits)],
                               outputs["int{} shapejit EmbeddingBagGroup.concat".format(bits)])
            if not same:
                raise SystemExit("tbe: int{}: shapejit's group differs from torch's ops over the same rows".format(bits))
        results = []
        for threads in (int(t) for t in args.dlrm_threads.split(",")):
            torch.set_num_threads(threads)
            t = time_min_median([fn for _, fn, _ in peers], args.dlrm_rounds, args.dlrm_batch_us)
            results.append((threads, t))
            for (label, _, _), (lo, med) in zip(peers, t):
                print("tbe {} thread(s) {:62} {:9.0f} / {:9.0f} us  [min / median]".format(threads, label, lo, med),
                      flush=True)
        torch.set_num_threads(args.threads)
    if args.markdown:
        counts = [r[0] for r in results]
        print("| tables | " + " | ".join("{} thread(s) us (min / median)".format(c) for c in counts) + " |")
        print("|---|" + "---|" * len(counts))
        for k, (label, _, _) in enumerate(peers):
            print("| {} | ".format(label) + " | ".join("{:.0f} / {:.0f}".format(*t[k]) for _, t in results) + " |")
