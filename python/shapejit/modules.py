"""shapejit.EmbeddingBag: torch.nn.EmbeddingBag whose forward runs shapejit's kernels."""
import warnings
from typing import Optional

import torch
from torch import Tensor

_MODES = {"sum": 0, "mean": 1, "max": 2}


class EmbeddingBag(torch.nn.EmbeddingBag):
    """A drop-in torch.nn.EmbeddingBag (same constructor, from_pretrained, state_dict) whose
    forward is torch.ops.shapejit.embedding_bag. Forward only: no gradient reaches the weight.
    max_norm (which renormalises the weight during forward) is not supported."""

    @classmethod
    def from_torch(cls, module: torch.nn.EmbeddingBag) -> "EmbeddingBag":
        """A shapejit.EmbeddingBag sharing `module`'s weight and settings."""
        m = cls(module.num_embeddings, module.embedding_dim, max_norm=module.max_norm,
                norm_type=module.norm_type, scale_grad_by_freq=module.scale_grad_by_freq,
                mode=module.mode, sparse=module.sparse, _weight=module.weight.data,
                include_last_offset=module.include_last_offset, padding_idx=module.padding_idx)
        m.weight = module.weight
        return m

    def forward(self, input: Tensor, offsets: Optional[Tensor] = None,
                per_sample_weights: Optional[Tensor] = None) -> Tensor:
        # The argument rules of torch.nn.functional.embedding_bag, with its messages.
        if self.max_norm is not None:
            raise NotImplementedError("shapejit.EmbeddingBag does not support max_norm")
        if per_sample_weights is not None and input.size() != per_sample_weights.size():
            raise ValueError(
                "embedding_bag: If per_sample_weights ({}) is not None, then it must have the same "
                "shape as the input ({})".format(per_sample_weights.shape, input.shape))
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a "
                                 "mini-batch of fixed length sequences. However, found offsets of type "
                                 "{}".format(type(offsets)))
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("offsets has to be a 1D Tensor but got None")
            if offsets.dim() != 1:
                raise ValueError("offsets has to be a 1D Tensor")
        else:
            raise ValueError("input has to be 1D or 2D Tensor, but got Tensor of dimension {}".format(input.dim()))
        if self.mode not in _MODES:
            raise ValueError("mode has to be one of sum, mean or max")
        if self.mode == "max" and self.scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        if self.mode == "max" and self.sparse:
            raise ValueError("max mode does not support sparse weights")
        if per_sample_weights is not None and self.mode != "sum":
            raise NotImplementedError(
                "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported "
                "for mode='sum' (got mode='{}'). Please open a feature request on GitHub.".format(self.mode))
        if self.weight.requires_grad and torch.is_grad_enabled():
            warnings.warn("shapejit.EmbeddingBag is forward only: no gradient flows to its weight "
                          "(run under torch.no_grad() or freeze the weight to silence this)", stacklevel=2)
        out = torch.ops.shapejit.embedding_bag(
            self.weight.detach(), input, offsets, self.scale_grad_by_freq, _MODES[self.mode], self.sparse,
            per_sample_weights, self.include_last_offset, self.padding_idx)
        return out[0]
