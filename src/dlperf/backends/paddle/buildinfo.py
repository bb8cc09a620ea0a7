"""What PaddlePaddle says it is: ``paddle.version`` (full version, commit, and what it was built
with: MKL, CUDA, cuDNN, NCCL, TensorRT, XPU), as ``paddle.version.show()`` prints it."""

import contextlib
import io

import paddle


def build_info():
    # type: () -> dict
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        paddle.version.show()
    return {"version": paddle.__version__, "git": paddle.version.commit,
            "build": text.getvalue()}
