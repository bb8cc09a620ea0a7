"""BERT-Base with pre-training heads (MLM + NSP) as a Keras model, layer for layer the PyTorch
backend's: post-LN encoder, LayerNorm eps 1e-12, exact (erf) GELU, dropout 0.1 on embeddings,
attention probabilities and both residual branches, MLM decoder tied to the word embeddings with
its own bias. The parameter count equals :mod:`dlperf.models` ``bert-base``.

Attention is written out (einsum, softmax, einsum) so XLA and Grappler see plain ops; there is no
padding mask because synthetic sequences are all full length.
"""

import keras
import tensorflow as tf
from keras import layers

LN_EPS = 1e-12
DROPOUT = 0.1
INIT = keras.initializers.TruncatedNormal(stddev=0.02)


def gelu(x):
    return keras.activations.gelu(x, approximate=False)


class Embeddings(layers.Layer):
    """Word + position + token-type embeddings, LayerNorm, dropout. Owns the word table the MLM
    decoder reuses."""

    def __init__(self, vocab_size, hidden, max_positions, type_vocab, **kwargs):
        super(Embeddings, self).__init__(**kwargs)
        self.word = self.add_weight(shape=(vocab_size, hidden), initializer=INIT, name="word")
        self.position = self.add_weight(shape=(max_positions, hidden), initializer=INIT,
                                        name="position")
        self.token_type = self.add_weight(shape=(type_vocab, hidden), initializer=INIT,
                                          name="token_type")
        self.norm = layers.LayerNormalization(epsilon=LN_EPS, name="ln")
        self.dropout = layers.Dropout(DROPOUT)

    def call(self, input_ids, token_type_ids, training=False):
        seq_len = tf.shape(input_ids)[1]
        x = (tf.gather(self.word, input_ids)
             + self.position[:seq_len][tf.newaxis]
             + tf.gather(self.token_type, token_type_ids))
        return self.dropout(self.norm(x), training=training)


class EncoderLayer(layers.Layer):
    """x = LN(x + attention(x)); x = LN(x + FFN(x))."""

    def __init__(self, hidden, heads, intermediate, **kwargs):
        super(EncoderLayer, self).__init__(**kwargs)
        self.heads = heads
        self.head_dim = hidden // heads
        dense = lambda units, name: layers.Dense(units, kernel_initializer=INIT,  # noqa: E731
                                                 name=name)
        self.query = dense(hidden, "query")
        self.key = dense(hidden, "key")
        self.value = dense(hidden, "value")
        self.out = dense(hidden, "attention_output")
        self.ln1 = layers.LayerNormalization(epsilon=LN_EPS, name="ln1")
        self.fc1 = dense(intermediate, "fc1")
        self.fc2 = dense(hidden, "fc2")
        self.ln2 = layers.LayerNormalization(epsilon=LN_EPS, name="ln2")
        self.attn_dropout = layers.Dropout(DROPOUT)
        self.dropout1 = layers.Dropout(DROPOUT)
        self.dropout2 = layers.Dropout(DROPOUT)

    def _split(self, t):
        shape = tf.shape(t)
        return tf.reshape(t, [shape[0], shape[1], self.heads, self.head_dim])

    def call(self, x, training=False):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scale = tf.cast(1.0 / (self.head_dim ** 0.5), q.dtype)
        scores = tf.einsum("bqhd,bkhd->bhqk", q * scale, k)
        probs = self.attn_dropout(tf.nn.softmax(scores, axis=-1), training=training)
        ctx = tf.einsum("bhqk,bkhd->bqhd", probs, v)
        shape = tf.shape(x)
        ctx = tf.reshape(ctx, [shape[0], shape[1], self.heads * self.head_dim])
        x = self.ln1(x + self.dropout1(self.out(ctx), training=training))
        ffn = self.fc2(gelu(self.fc1(x)))
        return self.ln2(x + self.dropout2(ffn, training=training))


class BertForPreTraining(keras.Model):
    """(input_ids, token_type_ids) -> (MLM logits (B, S, V), NSP logits (B, 2)), both float32."""

    def __init__(self, vocab_size=30522, hidden=768, layers_=12, heads=12, intermediate=3072,
                 max_positions=512, type_vocab=2, **kwargs):
        super(BertForPreTraining, self).__init__(**kwargs)
        self.embeddings = Embeddings(vocab_size, hidden, max_positions, type_vocab,
                                     name="embeddings")
        self.encoder = [EncoderLayer(hidden, heads, intermediate, name="layer_%d" % i)
                        for i in range(layers_)]
        self.pooler = layers.Dense(hidden, activation="tanh", kernel_initializer=INIT,
                                   name="pooler")
        self.nsp = layers.Dense(2, kernel_initializer=INIT, name="nsp")
        self.mlm_dense = layers.Dense(hidden, kernel_initializer=INIT, name="mlm_dense")
        self.mlm_ln = layers.LayerNormalization(epsilon=LN_EPS, name="mlm_ln")
        self.mlm_bias = self.add_weight(shape=(vocab_size,), initializer="zeros",
                                        name="mlm_bias")

    def call(self, inputs, training=False):
        input_ids, token_type_ids = inputs
        x = self.embeddings(input_ids, token_type_ids, training=training)
        for layer in self.encoder:
            x = layer(x, training=training)
        nsp_logits = self.nsp(self.pooler(x[:, 0]))
        t = self.mlm_ln(gelu(self.mlm_dense(x)))
        # tied decoder: the word-embedding matrix, read in the compute dtype
        table = tf.cast(self.embeddings.word, t.dtype)
        mlm_logits = tf.matmul(t, table, transpose_b=True) + tf.cast(self.mlm_bias, t.dtype)
        return tf.cast(mlm_logits, tf.float32), tf.cast(nsp_logits, tf.float32)


def pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels):
    """MLM cross-entropy over labelled positions (label -100 elsewhere) plus NSP cross-entropy,
    as the PyTorch backend computes it (logits over every position, in float32)."""
    weights = tf.cast(tf.not_equal(mlm_labels, -100), tf.float32)
    safe = tf.where(mlm_labels >= 0, mlm_labels, tf.zeros_like(mlm_labels))
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=mlm_logits)
    mlm = tf.reduce_sum(per_token * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
    nsp = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels,
                                                                        logits=nsp_logits))
    return mlm + nsp
