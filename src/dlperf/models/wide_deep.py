"""Wide & Deep (the OneFlow / HugeCTR click-through-rate benchmark).

The configuration of OneFlow-Benchmark's ClickThroughRate/WideDeepLearning/wdl_train_eval.py,
which DLPerf's Wide & Deep study runs against HugeCTR: Criteo's 13 dense and 26 categorical
fields; a wide part (an embedding of size 1 over 2 hashed cross features, summed into a score)
and a deep part (an embedding of size 16 over the 26 categorical fields, concatenated with the
dense fields, then 7 ReLU layers of 1024 with dropout 0.5 and a linear score); the two scores
add into one logit (sigmoid cross-entropy); Adam with lr 1e-3, lazy (sparse) on the two
embeddings. Its default vocabulary is 3,200,000 for both tables (the scripts pass one size to
both, as `vocab_size` does here); DLPerf's study grows it to 819,200,000.
"""

from typing import Dict, Mapping, Tuple

from .base import ModelSpec, check_positive

WIDE_DEEP_DENSE_FIELDS = 13
WIDE_DEEP_WIDE_FIELDS = 2
WIDE_DEEP_DEEP_FIELDS = 26
DEFAULTS = {"vocab_size": 3200000, "deep_embedding_size": 16, "hidden_units": 7,
            "hidden_size": 1024}


def _wide_deep_input_width(k):
    # type: (Mapping[str, int]) -> int
    return WIDE_DEEP_DEEP_FIELDS * k["deep_embedding_size"] + WIDE_DEEP_DENSE_FIELDS


def _wide_deep_params(k):
    # type: (Mapping[str, int]) -> int
    v, e, n, h = k["vocab_size"], k["deep_embedding_size"], k["hidden_units"], k["hidden_size"]
    mlp = _wide_deep_input_width(k) * h + h + (n - 1) * (h * h + h) + h + 1
    return v * 1 + v * e + mlp  # wide table, deep table, MLP with its score layer


def _wide_deep_flops(k):
    # type: (Mapping[str, int]) -> float
    """Forward FLOPs of one sample: the MLP's matmuls (embedding look-ups are gathers, which
    the catalogue's convention does not count; they cost memory bandwidth, not FLOPs)."""
    n, h = k["hidden_units"], k["hidden_size"]
    return 2.0 * (_wide_deep_input_width(k) * h + (n - 1) * h * h + h)


def _wide_deep_check(k):
    # type: (Mapping[str, int]) -> None
    check_positive(k, ("vocab_size", "deep_embedding_size", "hidden_units", "hidden_size"))


def _wide_deep_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    return {"dense_fields": (WIDE_DEEP_DENSE_FIELDS,), "wide_ids": (WIDE_DEEP_WIDE_FIELDS,),
            "deep_ids": (WIDE_DEEP_DEEP_FIELDS,), "label": (1,)}


WIDE_DEEP = ModelSpec(
    "wide-deep", "recommendation", "Wide & Deep click-through-rate model (OneFlow-Benchmark's "
    "WDL config: 2 wide + 26 deep sparse fields, 13 dense, 7 x 1024 MLP)",
    DEFAULTS, _wide_deep_params, _wide_deep_flops, _wide_deep_check, _wide_deep_inputs)
