"""BERT-Base with pre-training heads (MLM + NSP) as a TensorFlow 1.x graph, in the style of
Google's original ``modeling.py``: post-LN encoder, LayerNorm eps 1e-12, exact (erf) GELU,
dropout 0.1 (embeddings, attention probabilities, both residual branches), MLM decoder tied to the
word-embedding table with its own bias. Parameter count equals :mod:`dlperf.models` ``bert-base``.
Valid Python 3.7.
"""

import math

import tensorflow as tf

tf1 = tf.compat.v1

LN_EPS = 1e-12
DROPOUT = 0.1


def _init():
    return tf1.truncated_normal_initializer(stddev=0.02)


def gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def dropout(x, training):
    return tf.nn.dropout(x, rate=DROPOUT) if training else x


def layer_norm(x, name):
    with tf1.variable_scope(name):
        h = int(x.shape[-1])
        gamma = tf1.get_variable("gamma", [h], initializer=tf1.ones_initializer())
        beta = tf1.get_variable("beta", [h], initializer=tf1.zeros_initializer())
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf1.rsqrt(var + LN_EPS) * gamma + beta


def dense(x, units, name, activation=None):
    return tf1.layers.dense(x, units, activation=activation, kernel_initializer=_init(),
                            name=name)


def encoder_layer(x, heads, intermediate, training, name):
    """x: (B, S, H), all three known statically (synthetic batches have fixed shapes)."""
    batch, seq, hidden = [int(d) for d in x.shape]
    head_dim = hidden // heads
    with tf1.variable_scope(name):
        def split(t):
            return tf.transpose(tf.reshape(t, [batch, seq, heads, head_dim]), [0, 2, 1, 3])

        q = split(dense(x, hidden, "query"))
        k = split(dense(x, hidden, "key"))
        v = split(dense(x, hidden, "value"))
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_dim))
        probs = dropout(tf.nn.softmax(scores, axis=-1), training)
        ctx = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]), [batch, seq, hidden])
        x = layer_norm(x + dropout(dense(ctx, hidden, "attention_output"), training), "ln1")
        ffn = dense(gelu(dense(x, intermediate, "fc1")), hidden, "fc2")
        return layer_norm(x + dropout(ffn, training), "ln2")


def bert_pretraining(input_ids, token_type_ids, knobs, training):
    """(B, S) int32 ids and token types -> (MLM logits (B, S, V), NSP logits (B, 2))."""
    v, h = knobs["vocab_size"], knobs["hidden"]
    seq = int(input_ids.shape[1])
    with tf1.variable_scope("bert"):
        with tf1.variable_scope("embeddings"):
            word = tf1.get_variable("word", [v, h], initializer=_init())
            position = tf1.get_variable("position", [knobs["max_positions"], h],
                                        initializer=_init())
            token_type = tf1.get_variable("token_type", [knobs["type_vocab"], h],
                                          initializer=_init())
            x = (tf.gather(word, input_ids) + position[:seq][tf.newaxis]
                 + tf.gather(token_type, token_type_ids))
            x = dropout(layer_norm(x, "ln"), training)
        for i in range(knobs["layers"]):
            x = encoder_layer(x, knobs["heads"], knobs["intermediate"], training, "layer_%d" % i)
        nsp_logits = dense(dense(x[:, 0], h, "pooler", activation=tf.tanh), 2, "nsp")
        with tf1.variable_scope("mlm"):
            t = layer_norm(gelu(dense(x, h, "dense")), "ln")
            bias = tf1.get_variable("bias", [v], initializer=tf1.zeros_initializer())
            mlm_logits = tf.einsum("bsh,vh->bsv", t, word) + bias  # tied decoder
        return mlm_logits, nsp_logits


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    """MLM cross-entropy over labelled positions (label -100 elsewhere) plus NSP cross-entropy."""
    weights = tf.cast(tf.not_equal(mlm_labels, -100), tf.float32)
    safe = tf.where(mlm_labels >= 0, mlm_labels, tf.zeros_like(mlm_labels))
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=safe, logits=tf.cast(mlm_logits, tf.float32))
    mlm = tf.reduce_sum(per_token * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
    nsp = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=nsp_labels, logits=tf.cast(nsp_logits, tf.float32)))
    return mlm + nsp
