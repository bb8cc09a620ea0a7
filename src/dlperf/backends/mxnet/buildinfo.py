"""What MXNet says it is: version and the features compiled into libmxnet
(``mx.runtime.Features()``: MKLDNN, BLAS, CUDA, cuDNN, NCCL, DIST_KVSTORE...)."""

import mxnet as mx


def build_info():
    # type: () -> dict
    features = mx.runtime.Features()
    enabled = sorted(name for name, feature in features.items() if feature.enabled)
    return {"version": mx.__version__, "git": None, "build": "features: " + " ".join(enabled)}
