"""A model with every kind of shapejit module, for the tests that load a saved TorchScript file in
another process (test_scripted_model_loading.py, test_torch_cpp_consumer.py); its inputs are the
ones tests/torch_cpp_consumer/run_scripted_model.cpp builds."""
from typing import List, Optional, Tuple

import torch
from torch import Tensor


class Model(torch.nn.Module):
    """A float bag, a group of two, a 4-bit quantized bag and multi-head attention (whose
    in-projection is a torch.classes.shapejit.LinearGroup, saved through its pickle)."""

    def __init__(self, sj):
        super().__init__()
        torch.manual_seed(7)
        self.bag = sj.EmbeddingBag.from_torch(torch.nn.EmbeddingBag(10, 4, mode="mean"))
        self.group = sj.EmbeddingBagGroup([torch.nn.EmbeddingBag(10, 3, mode="max"), torch.nn.EmbeddingBag(10, 5)])
        self.quantized = sj.QuantizedEmbeddingBag.from_float(torch.nn.EmbeddingBag(10, 8), bits=4)
        self.attention = sj.MultiheadAttention(8, 2, batch_first=True)
        self.requires_grad_(False)
        self.eval()

    def forward(self, indices: Tensor, offsets: Tensor, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        group_offsets: List[Optional[Tensor]] = [offsets, offsets]
        grouped = self.group([indices, indices], group_offsets)
        attended, _ = self.attention(x, x, x, need_weights=False)
        return self.bag(indices, offsets), grouped[0], grouped[1], self.quantized(indices, offsets), attended


def inputs():
    """The inputs run_scripted_model.cpp builds."""
    indices = torch.tensor([1, 5, 7, 2, 2, 9, 0])
    offsets = torch.tensor([0, 3, 3, 5])
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8).div_(50.0).sin_()
    return indices, offsets, x


def save(sj, path):
    """Scripts the model, saves it to `path` and returns its outputs on inputs()."""
    scripted = torch.jit.script(Model(sj))
    scripted.save(str(path))
    with torch.no_grad():
        return scripted(*inputs())
