"""shapejit.MultiheadAttention: torch.nn.MultiheadAttention whose in-projection runs as one
shapejit linear group writing q, k and v head-split ([Nb, H, L, Dh]), the rest through torch ops.

The group is a cache of the parameters: torch.ops.shapejit's LinearGroup.run_current repacks it
when in_proj_weight (or q/k/v_proj_weight) or in_proj_bias is no longer the tensor, the memory
or the value (version counter) it was packed from, so load_state_dict, in-place edits under
torch.no_grad() and .to() are followed. Edits through `.data` bypass the version counter and are
not seen: change parameters in place under torch.no_grad() instead.
"""
import math
import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


class MultiheadAttention(torch.nn.MultiheadAttention):
    """A drop-in torch.nn.MultiheadAttention (same constructor, parameters, state_dict and
    torch 1.13 forward: masks, need_weights, average_attn_weights, batch_first, kdim/vdim,
    add_bias_kv, add_zero_attn, dropout in training). Differentiable: the in-projection's
    backward is torch's linear backward on the same tensors (shapejit/autograd.py).
    Parameters must be float32 CPU tensors when forward runs. batch_first is read when the
    module is built: build a new module (from_torch) to change it."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first,
                         device, dtype)
        self._group = self._new_group()

    @classmethod
    def from_torch(cls, mha: torch.nn.MultiheadAttention) -> "MultiheadAttention":
        """A shapejit module sharing `mha`'s parameters, out_proj and settings (and training mode)."""
        if not isinstance(mha, torch.nn.MultiheadAttention):
            raise TypeError("shapejit.MultiheadAttention.from_torch takes a torch.nn.MultiheadAttention, but got "
                            "{}".format(type(mha).__name__))
        m = cls(mha.embed_dim, mha.num_heads, mha.dropout, mha.in_proj_bias is not None, mha.bias_k is not None,
                mha.add_zero_attn, mha.kdim, mha.vdim, mha.batch_first, device="meta")
        for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k",
                     "bias_v"):
            setattr(m, name, getattr(mha, name))
        m.out_proj = mha.out_proj
        m.train(mha.training)
        m._group = m._new_group()
        return m

    def _new_group(self):
        """The linear group of the in-projection, packed now when the parameters are float32 CPU
        tensors; otherwise a tiny stand-in with the same settings that run_current repacks."""
        e, h = self.embed_dim, self.num_heads
        layout = "heads_batch_first" if self.batch_first else "heads_seq_first"
        self._group_batch_first = self.batch_first
        weights, bias = self._in_weights(), self.in_proj_bias
        if not all(t.device.type == "cpu" and t.dtype == torch.float32 for t in weights):
            weights = [torch.zeros(3 * e, 1)] if self._qkv_same_embed_dim else [torch.zeros(e, 1)] * 3
            bias = None
        rows = [e, e, e] if self._qkv_same_embed_dim else []
        return torch.classes.shapejit.LinearGroup([w.detach() for w in weights],
                                                  None if bias is None else bias.detach(), rows, [layout] * 3,
                                                  [h] * 3, [], [])

    def _in_weights(self) -> List[Tensor]:
        """The in-projection's weights as the group takes them: [in_proj_weight] or [q, k, v]."""
        packed: Optional[Tensor] = self.in_proj_weight
        if packed is not None:
            return [packed]
        q: Optional[Tensor] = self.q_proj_weight
        k: Optional[Tensor] = self.k_proj_weight
        v: Optional[Tensor] = self.v_proj_weight
        if q is None or k is None or v is None:
            raise RuntimeError("shapejit.MultiheadAttention: neither in_proj_weight nor all of q/k/v_proj_weight "
                               "are set")
        return [q, k, v]

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
                need_weights: bool = True, attn_mask: Optional[Tensor] = None,
                average_attn_weights: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
        num_heads, head_dim, batch_first = self.num_heads, self.head_dim, self.batch_first
        is_batched = _check_dims(query, key, value, key_padding_mask, attn_mask, num_heads)
        if batch_first != self._group_batch_first:
            raise RuntimeError("shapejit.MultiheadAttention: batch_first was {} when the module was built and is now "
                               "{}; build a new module to change it".format(self._group_batch_first, batch_first))
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool and not torch.is_floating_point(key_padding_mask):
                raise AssertionError("shapejit.MultiheadAttention: key_padding_mask must be bool or floating point, "
                                     "but is {}".format(key_padding_mask.dtype))
        if not is_batched:  # a batch of one in the group's layout, squeezed at the end
            batch_dim = 0 if batch_first else 1
            query, key, value = query.unsqueeze(batch_dim), key.unsqueeze(batch_dim), value.unsqueeze(batch_dim)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if batch_first:
            bsz, tgt_len, embed_dim = query.shape
            src_len = key.shape[1]
        else:
            tgt_len, bsz, embed_dim = query.shape
            src_len = key.shape[0]
        if embed_dim != self.embed_dim:
            raise AssertionError("shapejit.MultiheadAttention: query's last dimension must be embed_dim = {}, but is "
                                 "{}".format(self.embed_dim, embed_dim))
        if list(key.shape[:2]) != list(value.shape[:2]):
            raise AssertionError("shapejit.MultiheadAttention: key and value must agree in their batch and sequence "
                                 "dimensions, but have shapes {} and {}".format(key.shape, value.shape))
        weights = self._in_weights()
        # q, k, v: [bsz, H, L, Dh]; torch's are the same memory order viewed as [bsz * H, L, Dh].
        # The op (not the group's method): it has a fake kernel and torch's linear backward
        # (shapejit/fake.py, autograd.py), so it traces, exports and trains.
        q, k, v = torch.ops.shapejit.linear_group_run_current(self._group, weights, self.in_proj_bias,
                                                              [query, key, value])

        if attn_mask is not None:
            if attn_mask.dtype == torch.uint8:
                warnings.warn("shapejit.MultiheadAttention: a uint8 attn_mask is read as bool (as torch does, which "
                              "deprecates it): pass a bool mask")
                attn_mask = attn_mask.to(torch.bool)
            elif not (attn_mask.is_floating_point() or attn_mask.dtype == torch.bool):
                raise AssertionError("shapejit.MultiheadAttention: attn_mask must be bool, uint8 or floating point, "
                                     "but is {}".format(attn_mask.dtype))
            if attn_mask.dim() == 2:
                if list(attn_mask.shape) != [tgt_len, src_len]:
                    raise RuntimeError("shapejit.MultiheadAttention: a 2-D attn_mask must have shape {}, but has "
                                       "{}".format((tgt_len, src_len), attn_mask.shape))
                attn_mask = attn_mask.unsqueeze(0)
            elif list(attn_mask.shape) != [bsz * num_heads, tgt_len, src_len]:
                raise RuntimeError("shapejit.MultiheadAttention: a 3-D attn_mask must have shape {}, but has "
                                   "{}".format((bsz * num_heads, tgt_len, src_len), attn_mask.shape))

        bias_k, bias_v = self.bias_k, self.bias_v
        if bias_k is not None and bias_v is not None:  # one more key/value position, after projection
            k = torch.cat([k, bias_k.view(1, num_heads, 1, head_dim).expand(bsz, -1, -1, -1)], dim=2)
            v = torch.cat([v, bias_v.view(1, num_heads, 1, head_dim).expand(bsz, -1, -1, -1)], dim=2)
            attn_mask, key_padding_mask = _pad_masks(attn_mask, key_padding_mask)
        if self.add_zero_attn:
            zeros = torch.zeros((bsz, num_heads, 1, head_dim), dtype=k.dtype, device=k.device)
            k, v = torch.cat([k, zeros], dim=2), torch.cat([v, zeros], dim=2)
            attn_mask, key_padding_mask = _pad_masks(attn_mask, key_padding_mask)
        src_len = k.size(2)
        q = q.view(bsz * num_heads, tgt_len, head_dim)
        k = k.reshape(bsz * num_heads, src_len, head_dim)
        v = v.reshape(bsz * num_heads, src_len, head_dim)

        if key_padding_mask is not None:
            if list(key_padding_mask.shape) != [bsz, src_len]:
                raise AssertionError("shapejit.MultiheadAttention: key_padding_mask must have shape {}, but has "
                                     "{}".format((bsz, src_len), key_padding_mask.shape))
            key_padding_mask = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1).reshape(
                bsz * num_heads, 1, src_len)
            if attn_mask is None:
                attn_mask = key_padding_mask
            elif attn_mask.dtype == torch.bool:
                attn_mask = attn_mask.logical_or(key_padding_mask)
            else:
                attn_mask = attn_mask.masked_fill(key_padding_mask, float("-inf"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill_(attn_mask, float("-inf"))

        # torch's order of roundings: scale q, then (mask +) q k^T, softmax, dropout, times v.
        q = q / math.sqrt(head_dim)
        if attn_mask is not None:
            probs = torch.baddbmm(attn_mask, q, k.transpose(-2, -1))
        else:
            probs = torch.bmm(q, k.transpose(-2, -1))
        probs = F.softmax(probs, dim=-1)
        if self.training and self.dropout > 0.0:
            probs = F.dropout(probs, p=self.dropout)
        out = torch.bmm(probs, v)  # [bsz * H, L, Dh]
        if batch_first:  # rows (n, l): the output is [bsz, L, E] without a transpose afterwards
            out = out.view(bsz, num_heads, tgt_len, head_dim).transpose(1, 2).reshape(bsz * tgt_len, embed_dim)
        else:
            out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        out = out.view(bsz, tgt_len, embed_dim) if batch_first else out.view(tgt_len, bsz, embed_dim)
        if not is_batched:
            out = out.squeeze(0) if batch_first else out.squeeze(1)
        if not need_weights:
            return out, None
        probs = probs.view(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            probs = probs.sum(dim=1) / num_heads
        if not is_batched:
            probs = probs.squeeze(0)
        return out, probs


def _pad_masks(attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor]
               ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """The masks with one more key position, which they do not mask (bias_k/v, zero attention)."""
    if attn_mask is not None:
        attn_mask = F.pad(attn_mask, (0, 1))
    if key_padding_mask is not None:
        key_padding_mask = F.pad(key_padding_mask, (0, 1))
    return attn_mask, key_padding_mask


def _check_dims(query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor],
                attn_mask: Optional[Tensor], num_heads: int) -> bool:
    """torch 1.13's dimension rules (AssertionError, as torch raises); True for batched input."""
    batched = query.dim() == 3
    if not batched and query.dim() != 2:
        raise AssertionError("shapejit.MultiheadAttention: query must be 2-D (unbatched) or 3-D (batched), but is "
                             "{}-D".format(query.dim()))
    dims = query.dim()
    if key.dim() != dims or value.dim() != dims:
        raise AssertionError("shapejit.MultiheadAttention: key and value must be {}-D like query, but are {}-D and "
                             "{}-D".format(dims, key.dim(), value.dim()))
    if key_padding_mask is not None and key_padding_mask.dim() != dims - 1:
        raise AssertionError("shapejit.MultiheadAttention: key_padding_mask must be {}-D for a {}-D query, but is "
                             "{}-D".format(dims - 1, dims, key_padding_mask.dim()))
    if attn_mask is not None:
        if attn_mask.dim() != 2 and attn_mask.dim() != 3:
            raise AssertionError("shapejit.MultiheadAttention: attn_mask must be 2-D or 3-D, but is {}-D".format(
                attn_mask.dim()))
        expected = [num_heads, query.shape[0], key.shape[0]]
        if not batched and attn_mask.dim() == 3 and list(attn_mask.shape) != expected:
            raise AssertionError("shapejit.MultiheadAttention: a 3-D attn_mask of unbatched input must have shape "
                                 "{}, but has {}".format(expected, list(attn_mask.shape)))
    return batched
