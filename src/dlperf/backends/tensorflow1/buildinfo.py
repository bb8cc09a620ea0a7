"""What TensorFlow 1.x says it is: version, git revision and how it was built (1.15 has no
``tf.sysconfig.get_build_info``: its compile flags and whether CUDA is compiled in)."""

import json

import tensorflow as tf


def build_info():
    # type: () -> dict
    build = {"compile_flags": tf.sysconfig.get_compile_flags(),
             "built_with_cuda": tf.test.is_built_with_cuda()}
    return {"version": tf.__version__, "git": tf.version.GIT_VERSION,
            "build": json.dumps(build, sort_keys=True)}
