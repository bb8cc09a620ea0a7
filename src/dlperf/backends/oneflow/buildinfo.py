"""What OneFlow says it is: version, git commit and ``oneflow.sysconfig`` (CUDA version, build
type, MLIR and RDMA support)."""

import json

import oneflow
import oneflow.sysconfig as sysconfig


def build_info():
    # type: () -> dict
    build = {"cmake_build_type": sysconfig.cmake_build_type(),
             "with_cuda": sysconfig.with_cuda(), "with_mlir": sysconfig.with_mlir(),
             "with_rdma": sysconfig.with_rdma()}
    if build["with_cuda"]:
        build["cuda_version"] = sysconfig.get_cuda_version()
    return {"version": oneflow.__version__, "git": getattr(oneflow, "__git_commit__", None),
            "build": json.dumps(build, sort_keys=True, default=str)}
