"""shapejit for PyTorch: JIT-generated embedding bags and fused linear groups.

    import shapejit
    out, offset2bag, bag_size, max_indices = shapejit.embedding_bag(weight, indices, offsets, mode=1)
    bag = shapejit.EmbeddingBag.from_pretrained(weight, mode="sum")   # an nn.EmbeddingBag
    group = shapejit.EmbeddingBagGroup(model_bags)                   # many bags, one engine call
    qbag = shapejit.EmbeddingBag.from_torch(quantized_module)        # torch.ao.nn.quantized.EmbeddingBag
    packed = shapejit.quantized.embedding_bag_4bit_prepack(weight)   # torch's packed rows
    proj = shapejit.in_projection(mha)                               # an nn.MultiheadAttention
    q, k, v = proj(query, key, value)                                # each [Nb, H, L, Dh]
    import shapejit.torchrec                                         # TorchRec's collections (optional, imports torchrec)

Everything runs on CPU tensors: f32, f16 and bf16 tables, and rowwise-quantized 8/4/2-bit tables
(shapejit.quantized); linear groups take f32. Float bags and linear groups are differentiable
(their backward is torch's, shapejit.autograd); quantized tables are inference only. Every op has
a fake kernel (shapejit.fake), so torch.compile and torch.export trace through them.

Threads follow torch.set_num_threads unless shapejit.set_num_threads(n > 0) fixes a count
(shapejit.engine explains the rule); shapejit.__version__, shapejit.isa() and
shapejit.kernel_cache_stats() describe the engine.
"""
import torch

from . import _library

library_path = _library.load()

#: torch.ops.shapejit.embedding_bag: torch.embedding_bag's arguments and four results.
embedding_bag = torch.ops.shapejit.embedding_bag
#: torch.ops.shapejit.linear_group_run(group, inputs) -> outputs.
linear_group_run = torch.ops.shapejit.linear_group_run

from . import fake, autograd  # noqa: E402,F401  (fake kernels and gradients of the operators above)
from . import quantized  # noqa: E402  (needs the operators registered above)
from .modules import EmbeddingBag, EmbeddingBagGroup, QuantizedEmbeddingBag  # noqa: E402
from .linear import InProjection, in_projection, linear_group, quantize_linear_weights  # noqa: E402
from .engine import get_num_threads, isa, kernel_cache_stats, max_num_threads, set_num_threads  # noqa: E402

# Follow torch's thread count from the start, so get_num_threads() agrees with torch before the
# first call too (each call re-reads torch's count).
set_num_threads(0)

#: The version of the loaded extension (include/shapejit/version.h), e.g. "0.2.0".
__version__ = torch.ops.shapejit.version()

__all__ = ["embedding_bag", "linear_group_run", "EmbeddingBag", "EmbeddingBagGroup", "QuantizedEmbeddingBag", "InProjection",
           "in_projection", "linear_group", "quantize_linear_weights", "library_path", "quantized", "get_num_threads", "max_num_threads",
           "set_num_threads", "isa", "kernel_cache_stats"]

from .attention import MultiheadAttention  # noqa: E402
from .optimize import optimize  # noqa: E402

__all__ += ["MultiheadAttention", "optimize"]
