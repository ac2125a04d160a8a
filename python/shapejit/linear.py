"""Linear groups from PyTorch: torch.classes.shapejit.LinearGroup, and the in-projection of an
nn.MultiheadAttention as one prepacked group producing q, k, v in head-split layout.

Quantized forms (docs/quantized-linear-semantics.md): quant="qd8-qc8w" | "qd8-qc4w" (int8 inputs
quantized per row at each run, int8 / int4 weights per output channel, exact int32 accumulation)
or "f32-qc8w" | "f32-qc4w" (weight-only). The weights are quantized when the group is built, or
given as codes. Autograd: the inputs' gradient flows through the dequantized weights
(codes * scale, exactly the weights the forward used); the f32 weights' gradient is the
straight-through one (torch's linear backward as if they were not quantized)."""
import math
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor


QUANT_FORMS = ("f32", "qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w")


def quantize_linear_weights(weight: Tensor, quant: str) -> Tuple[Tensor, Tensor]:
    """Per-row quantized weights by the rules of `quant` (a quantized form): codes int8 [R, K]
    (one code per byte, also for int4) and scales float32 [R], weight ~ codes * scales[:, None]."""
    return torch.ops.shapejit.quantize_linear_weights(weight.detach(), quant)


def linear_group(weights: Sequence[Tensor], bias: Optional[Tensor] = None, rows: Sequence[int] = (),
                 layouts: Sequence[str] = (), heads: Sequence[int] = (), scales: Sequence[float] = (),
                 activations: Sequence[str] = (), quant: str = "f32", codes: Optional[Sequence[Tensor]] = None,
                 code_scales: Optional[Sequence[Tensor]] = None):
    """Builds a torch.classes.shapejit.LinearGroup; the weights and bias are copied (packed) now.

    One weight [R, K] with `rows` = (N_0, N_1, ...): part p is the next N_p rows (packed form,
    e.g. in_proj_weight). Several weights: one [N_p, K_p] per part. `bias` is packed: part p reads
    its own row range. Per part (empty = defaults): layout 'row_major' | 'heads_seq_first' |
    'heads_batch_first', heads H, scale (after the activation), activation 'none' | 'relu' |
    'gelu' | 'gelu_tanh' | 'silu'. `group.run([x_0, x_1, ...])` returns one output per part.

    `quant` picks the form (module docstring). With `codes` (int8, one matrix in place of each
    weight: pass `weights=()`) and `code_scales` (float32, one per row of codes), the weights are
    given quantized, e.g. from quantize_linear_weights.
    """
    if quant not in QUANT_FORMS:
        raise ValueError("shapejit.linear_group: quant must be one of {}, but got {!r}".format(QUANT_FORMS, quant))
    if (codes is None) != (code_scales is None):
        raise ValueError("shapejit.linear_group: pass codes and code_scales together")
    if codes is not None:
        if len(weights) != 0:
            raise ValueError("shapejit.linear_group: pass either weights or codes, not both")
        tensors, given_scales = [c.detach() for c in codes], [s.detach() for s in code_scales]
    else:
        tensors, given_scales = [w.detach() for w in weights], []
    return torch.classes.shapejit.LinearGroup(
        tensors, None if bias is None else bias.detach(), list(rows), list(layouts), list(heads),
        [float(s) for s in scales], list(activations), quant, given_scales)


class InProjection:
    """The in-projection of one nn.MultiheadAttention as a prepacked linear group.

    `proj(query, key, value)` returns q, k, v as contiguous [Nb, H, L, Dh] tensors (L and S for
    key and value), i.e. the head-split layout attention consumes; for unbatched inputs [L, E]
    they are [H, L, Dh]. The weights are copied when the object is built: rebuild it after they
    change. With scale_query, q is multiplied by 1/sqrt(Dh) (folded into the kernel epilogue).
    """

    def __init__(self, mha: torch.nn.MultiheadAttention, scale_query: bool = False, quant: str = "f32"):
        self.embed_dim = mha.embed_dim
        self.num_heads = mha.num_heads
        self.head_dim = mha.head_dim
        self.batch_first = mha.batch_first
        layout = "heads_batch_first" if mha.batch_first else "heads_seq_first"
        e = mha.embed_dim
        if mha._qkv_same_embed_dim:
            weights, rows = [mha.in_proj_weight], [e, e, e]
        else:
            weights, rows = [mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight], []
        q_scale = 1.0 / math.sqrt(self.head_dim) if scale_query else 1.0
        # The copies the group is packed from, passed at each call (run_current finds them
        # packed): a traced graph then holds them as tensors, which the gradient of the inputs
        # reads (the group's own copies are opaque to torch.compile).
        self.weights = [w.detach().clone() for w in weights]
        self.bias = None if mha.in_proj_bias is None else mha.in_proj_bias.detach().clone()
        self.group = linear_group(self.weights, self.bias, rows, [layout] * 3, [mha.num_heads] * 3,
                                  [q_scale, 1.0, 1.0], quant=quant)

    def __call__(self, query: Tensor, key: Tensor, value: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        unbatched = query.dim() == 2
        if unbatched:
            batch_dim = 0 if self.batch_first else 1
            query, key, value = (t.unsqueeze(batch_dim) for t in (query, key, value))
        # The op, not the method: it traces under torch.compile / torch.export and passes the
        # inputs' gradient (the weights were copied: they get none).
        q, k, v = torch.ops.shapejit.linear_group_run_current(self.group, self.weights, self.bias,
                                                              [query, key, value])
        if unbatched:
            q, k, v = q.squeeze(0), k.squeeze(0), v.squeeze(0)
        return q, k, v


def in_projection(mha: torch.nn.MultiheadAttention, scale_query: bool = False, quant: str = "f32") -> InProjection:
    """The in-projection of `mha` as a prepacked group: proj(query, key, value) -> q, k, v;
    `quant` picks a quantized form (the weights are quantized once, here)."""
    return InProjection(mha, scale_query, quant)
