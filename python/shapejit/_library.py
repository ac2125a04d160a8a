"""Finds and loads the shapejit PyTorch extension (libshapejit_torch_ops.so)."""
import os
from pathlib import Path

import torch

LIBRARY_NAME = "libshapejit_torch_ops.so"


def candidate_paths():
    """Where the extension is looked for, in order: $SHAPEJIT_TORCH_LIB when set (an explicit
    choice, and then the only one), inside this package (pip install, cmake --install), then the
    repository's build directory (a source checkout: python/ is beside build/)."""
    env = os.environ.get("SHAPEJIT_TORCH_LIB")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    return [here / LIBRARY_NAME, here.parent.parent / "build" / "python" / LIBRARY_NAME]


def load():
    """Loads the extension once; returns its path. Raises ImportError naming every place tried."""
    tried = candidate_paths()
    for path in tried:
        if path.is_file():
            torch.ops.load_library(str(path))
            return path
    raise ImportError(
        "shapejit: cannot find the PyTorch extension; tried "
        + ", ".join(str(p) for p in tried)
        + ". Install the package (pip install --no-build-isolation <repository>), build the extension "
        "(cmake --build build --target shapejit_torch_ops), or set SHAPEJIT_TORCH_LIB to its path."
    )
