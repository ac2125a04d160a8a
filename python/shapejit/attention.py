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
    torch 2.x forward: masks, need_weights, average_attn_weights, is_causal, batch_first,
    kdim/vdim, add_bias_kv, add_zero_attn, dropout in training). Differentiable: the
    in-projection's backward is torch's linear backward on the same tensors (shapejit/autograd.py).
    Parameters must be float32 CPU tensors when forward runs. batch_first is read when the
    module is built: build a new module (from_torch) to change it."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first,
                         device, dtype)
        self._quant = "f32"
        self._group = self._new_group()

    @classmethod
    def from_torch(cls, mha: torch.nn.MultiheadAttention, quant: str = "f32") -> "MultiheadAttention":
        """A shapejit module sharing `mha`'s parameters, out_proj and settings (and training mode).
        `quant` runs the in-projection in a quantized form (docs/quantized-linear-semantics.md):
        the parameters stay float32 and are quantized whenever the group is (re)packed."""
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
        m._quant = quant
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
            # float32 whatever torch's default dtype is: the group takes float32 weights only.
            stand_in = torch.zeros(3 * e if self._qkv_same_embed_dim else e, 1, dtype=torch.float32)
            weights = [stand_in] if self._qkv_same_embed_dim else [stand_in] * 3
            bias = None
        rows = [e, e, e] if self._qkv_same_embed_dim else []
        return torch.classes.shapejit.LinearGroup([w.detach() for w in weights],
                                                  None if bias is None else bias.detach(), rows, [layout] * 3,
                                                  [h] * 3, [], [], self._quant, [])

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
                average_attn_weights: bool = True, is_causal: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        num_heads, head_dim, batch_first = self.num_heads, self.head_dim, self.batch_first
        is_batched = _check_dims(query, key, value, key_padding_mask, attn_mask, num_heads)
        if batch_first != self._group_batch_first:
            raise RuntimeError("shapejit.MultiheadAttention: batch_first was {} when the module was built and is now "
                               "{}; build a new module to change it".format(self._group_batch_first, batch_first))
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

        # torch 2.x's mask rules (F.multi_head_attention_forward): both masks become float (-inf
        # where a bool mask is True) and are added; is_causal is a hint that attn_mask is causal.
        key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", attn_mask, "attn_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("shapejit.MultiheadAttention: is_causal=True is a hint that attn_mask is causal, so it "
                               "needs attn_mask (nn.Transformer.generate_square_subsequent_mask makes one)")
        sdpa_causal = is_causal and key_padding_mask is None and not need_weights
        if sdpa_causal:
            attn_mask = None  # scaled_dot_product_attention applies the causal mask itself, as torch does
        else:
            attn_mask = _float_mask(attn_mask, "attn_mask", None, "", query.dtype)
        if attn_mask is not None:
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

        if key_padding_mask is not None:
            if list(key_padding_mask.shape) != [bsz, src_len]:
                raise AssertionError("shapejit.MultiheadAttention: key_padding_mask must have shape {}, but has "
                                     "{}".format((bsz, src_len), key_padding_mask.shape))
            key_padding_mask = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1).reshape(
                bsz * num_heads, 1, src_len)
            attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
        dropout_p = self.dropout if self.training else 0.0

        if not need_weights:
            # torch 2.x runs scaled_dot_product_attention on [bsz, H, L, Dh]: the group's layout.
            if attn_mask is not None:
                attn_mask = attn_mask.unsqueeze(0) if attn_mask.size(0) == 1 else attn_mask.view(
                    bsz, num_heads, -1, src_len)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, sdpa_causal)
            out = out.permute(2, 0, 1, 3) if not batch_first else out.permute(0, 2, 1, 3)
            probs = None
        else:
            # torch's order of roundings: scale q by sqrt(1 / Dh), (mask +) q k^T, softmax, dropout, times v.
            q = q.view(bsz * num_heads, tgt_len, head_dim) * math.sqrt(1.0 / float(head_dim))
            k = k.reshape(bsz * num_heads, src_len, head_dim)
            v = v.reshape(bsz * num_heads, src_len, head_dim)
            if attn_mask is not None:
                probs = torch.baddbmm(attn_mask, q, k.transpose(-2, -1))
            else:
                probs = torch.bmm(q, k.transpose(-2, -1))
            probs = F.softmax(probs, dim=-1)
            if dropout_p > 0.0:
                probs = F.dropout(probs, p=dropout_p)
            out = torch.bmm(probs, v).view(bsz, num_heads, tgt_len, head_dim)
            out = out.permute(2, 0, 1, 3) if not batch_first else out.permute(0, 2, 1, 3)
        # rows (l, n) or (n, l): batch_first output needs no transpose afterwards
        out = out.reshape(-1, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        out = out.view(bsz, tgt_len, embed_dim) if batch_first else out.view(tgt_len, bsz, embed_dim)
        if not is_batched:
            out = out.squeeze(0) if batch_first else out.squeeze(1)
        if probs is None:
            return out, None
        probs = probs.view(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            probs = probs.mean(dim=1)
        if not is_batched:
            probs = probs.squeeze(0)
        return out, probs


def _float_mask(mask: Optional[Tensor], name: str, other: Optional[Tensor], other_name: str,
                dtype: torch.dtype) -> Optional[Tensor]:
    """torch 2.x's canonical mask: bool becomes 0 / -inf of `dtype`, float stays; other dtypes
    are refused (torch 1.13 read uint8 as bool; 2.x refuses it). Warns, as torch does, when the
    two masks' dtypes differ."""
    if mask is None:
        return None
    if mask.dtype != torch.bool and not torch.is_floating_point(mask):
        raise AssertionError("shapejit.MultiheadAttention: {} must be bool or floating point (torch 2.x refuses "
                             "other dtypes), but is {}".format(name, mask.dtype))
    if other is not None and other.dtype != mask.dtype:
        warnings.warn("shapejit.MultiheadAttention: {} is {} and {} is {}; torch deprecates masks of different "
                      "dtypes: give both the same".format(name, mask.dtype, other_name, other.dtype), stacklevel=3)
    if mask.dtype == torch.bool:
        return torch.zeros_like(mask, dtype=dtype).masked_fill_(mask, float("-inf"))
    return mask


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
    # A nested tensor has no sizes (query.dim() works, query.shape raises torch's internal error):
    # refuse it first, naming the argument. torch takes one only in its eval-mode fast path.
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.is_nested:
            raise NotImplementedError("shapejit.MultiheadAttention: {} is a nested tensor (torch.nested), which the "
                                      "in-projection does not take: pass a padded tensor "
                                      "(nested.to_padded_tensor(0.0)) with a key_padding_mask, or use "
                                      "torch.nn.MultiheadAttention".format(name))
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
