"""Synthetic training batches as numpy arrays, for backends that build their data from numpy.

The recipe is the PyTorch backend's: images from N(0, 1), uniform labels; for BERT a fixed count
of masked positions per row (15%, never [CLS] at 0, at least one) replaced by [MASK], MLM labels
-100 elsewhere, sentence A then sentence B token types, random NSP labels. Made once, before the
timed window. numpy only; valid Python 3.7.
"""

from typing import Dict

import numpy as np

MLM_FRACTION = 0.15


def resnet_batch(batch, image_size, num_classes, seed, channels_last=True):
    # type: (int, int, int, int, bool) -> Dict[str, np.ndarray]
    rng = np.random.RandomState(seed)
    shape = ((batch, image_size, image_size, 3) if channels_last
             else (batch, 3, image_size, image_size))
    return {
        "images": rng.standard_normal(shape).astype(np.float32),
        "labels": rng.randint(0, num_classes, size=(batch,)).astype(np.int32),
    }


def bert_batch(batch, seq_len, vocab_size, type_vocab, seed):
    # type: (int, int, int, int, int) -> Dict[str, np.ndarray]
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, vocab_size, size=(batch, seq_len)).astype(np.int32)
    n_masked = max(1, int(round(MLM_FRACTION * seq_len)))
    masked = np.zeros((batch, seq_len), dtype=bool)
    for row in range(batch):
        masked[row, rng.permutation(seq_len - 1)[:n_masked] + 1] = True
    mlm_labels = np.where(masked, ids, -100).astype(np.int32)
    mask_token = 103 if vocab_size > 103 else vocab_size - 1  # [MASK] in uncased BERT
    ids = np.where(masked, mask_token, ids).astype(np.int32)
    segment = np.minimum((np.arange(seq_len) >= seq_len // 2).astype(np.int32), type_vocab - 1)
    token_types = np.tile(segment[None, :], (batch, 1)).astype(np.int32)
    nsp_labels = rng.randint(0, 2, size=(batch,)).astype(np.int32)
    return {"input_ids": ids, "token_type_ids": token_types, "mlm_labels": mlm_labels,
            "nsp_labels": nsp_labels}
