"""What TensorFlow says it is: version, git revision (``tf.version.GIT_VERSION``) and its build
information (``tf.sysconfig.get_build_info()``: CUDA/cuDNN versions, compute capabilities)."""

import json

import tensorflow as tf


def build_info():
    # type: () -> dict
    build = dict(tf.sysconfig.get_build_info())
    build["compile_flags"] = tf.sysconfig.get_compile_flags()
    return {"version": tf.__version__, "git": tf.version.GIT_VERSION,
            "build": json.dumps(build, sort_keys=True, default=str)}
