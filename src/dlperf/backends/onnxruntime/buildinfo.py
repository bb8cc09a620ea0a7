"""What ONNX Runtime says it is: version, its build information (the binding's
``get_build_info()``: git commit, build type) and the execution providers compiled in."""

import re

import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as binding


def build_info():
    # type: () -> dict
    text = binding.get_build_info() if hasattr(binding, "get_build_info") else ""
    commit = re.search(r"git-commit-id=([0-9a-f]+)", text)
    build = "{}\nproviders: {}".format(text, " ".join(ort.get_available_providers()))
    return {"version": ort.__version__, "git": commit.group(1) if commit else None,
            "build": build.strip()}
