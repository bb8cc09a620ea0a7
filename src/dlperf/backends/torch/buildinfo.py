"""What PyTorch says it is: version, git revision, and its build configuration
(``torch.__config__.show()``: compiler, BLAS, oneDNN, CUDA, the flags)."""

import torch


def build_info():
    # type: () -> dict
    return {"version": torch.__version__, "git": getattr(torch.version, "git_version", None),
            "build": torch.__config__.show()}
