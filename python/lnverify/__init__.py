"""lnverify for PyTorch: audit which LayerNorms of an nn.Module fold exactly into RMSNorm,
fold them (for inference, or for training as CBWC + RMSNorm), and prove a fold equal to the
original by exact evaluation. The API is lnverify.torch (docs/python.md); lnverify._core is
the C++ core (the CLI's analysis, reports and ONNX reader).
"""
from ._core import __version__, ModelError, NotEvaluableError

__all__ = ["__version__", "ModelError", "NotEvaluableError", "torch"]


def __getattr__(name):
    # lnverify.torch imports torch: only when asked for, so `import lnverify` stays light.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    if name in ("ExportError", "InputError", "NoLayerNormError", "FoldError"):
        import importlib
        return getattr(importlib.import_module(".torch", __name__), name)
    raise AttributeError(f"module 'lnverify' has no attribute '{name}'")
