"""shapejit.torchrec: TorchRec's embedding-bag collections computed by shapejit's engine.

    import torchrec, shapejit.torchrec
    collection = shapejit.torchrec.EmbeddingBagCollection.from_torchrec(ebc)   # or a QuantEBC
    pooled = collection(kjt)                                                  # a torchrec KeyedTensor

Imported only on request (`import shapejit` never imports torchrec). torchrec 1.8.0 must be
installed without its dependencies, since its metadata asks for the CUDA fbgemm-gpu build:
`pip install torchrec==1.8.0 --no-deps` beside fbgemm-gpu-cpu 1.8.0 (README, "TorchRec")."""
try:
    import torchrec  # noqa: F401
except ImportError as e:  # say how to install it, not just that it is missing
    raise ImportError("shapejit.torchrec needs torchrec, which is not importable ({}): install it with "
                      "`pip install torchrec==1.8.0 --no-deps` plus fbgemm-gpu-cpu==1.8.0 and torchrec's other "
                      "dependencies (README, section TorchRec)".format(e)) from e

from .collection import EmbeddingBagCollection  # noqa: E402

__all__ = ["EmbeddingBagCollection"]
