"""What JAX says it is: version, jaxlib's git revision and ``jax.print_environment_info``
(jax, jaxlib, numpy, Python, the platform, and on a GPU host nvidia-smi's view)."""

import jax
import jaxlib.version


def build_info():
    # type: () -> dict
    return {"version": jax.__version__, "git": getattr(jaxlib.version, "_git_hash", None),
            "build": jax.print_environment_info(return_string=True)}
