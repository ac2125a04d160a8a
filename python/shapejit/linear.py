"""Linear groups from PyTorch: torch.classes.shapejit.LinearGroup, and the in-projection of an
nn.MultiheadAttention as one prepacked group producing q, k, v in head-split layout."""
import math
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor


def linear_group(weights: Sequence[Tensor], bias: Optional[Tensor] = None, rows: Sequence[int] = (),
                 layouts: Sequence[str] = (), heads: Sequence[int] = (), scales: Sequence[float] = (),
                 activations: Sequence[str] = ()):
    """Builds a torch.classes.shapejit.LinearGroup; the weights and bias are copied (packed) now.

    One weight [R, K] with `rows` = (N_0, N_1, ...): part p is the next N_p rows (packed form,
    e.g. in_proj_weight). Several weights: one [N_p, K_p] per part. `bias` is packed: part p reads
    its own row range. Per part (empty = defaults): layout 'row_major' | 'heads_seq_first' |
    'heads_batch_first', heads H, scale (after the activation), activation 'none' | 'relu' |
    'gelu' | 'gelu_tanh' | 'silu'. `group.run([x_0, x_1, ...])` returns one output per part.
    """
    return torch.classes.shapejit.LinearGroup(
        [w.detach() for w in weights], None if bias is None else bias.detach(), list(rows), list(layouts),
        list(heads), [float(s) for s in scales], list(activations))


class InProjection:
    """The in-projection of one nn.MultiheadAttention as a prepacked linear group.

    `proj(query, key, value)` returns q, k, v as contiguous [Nb, H, L, Dh] tensors (L and S for
    key and value), i.e. the head-split layout attention consumes; for unbatched inputs [L, E]
    they are [H, L, Dh]. The weights are copied when the object is built: rebuild it after they
    change. With scale_query, q is multiplied by 1/sqrt(Dh) (folded into the kernel epilogue).
    """

    def __init__(self, mha: torch.nn.MultiheadAttention, scale_query: bool = False):
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
                                  [q_scale, 1.0, 1.0])

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


def in_projection(mha: torch.nn.MultiheadAttention, scale_query: bool = False) -> InProjection:
    """The in-projection of `mha` as a prepacked group: proj(query, key, value) -> q, k, v."""
    return InProjection(mha, scale_query)
