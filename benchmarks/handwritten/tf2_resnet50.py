"""Hand-written, idiomatic TensorFlow 2 training loop for ResNet-50 v1.5: the baseline dlperf's
tensorflow backend must match. The network is the project's (same layers, same parameter
count); the loop is what a TF user writes: a tf.function step (XLA with jit_compile when asked),
Keras mixed precision, SGD momentum + L2 in the loss, one synthetic batch held on the device,
warm-up, then one timed window closed by fetching the last loss.

    python tf2_resnet50.py BATCH IMAGE WARMUP STEPS {fp32,amp-bf16} {0,1} [--min-seconds S]
    (prints JSON)
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dlperf.backends.tensorflow.resnet import resnet50  # noqa: E402

min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
precision, compiled = sys.argv[5], sys.argv[6] == "1"
keras.mixed_precision.set_global_policy({"amp-bf16": "mixed_bfloat16"}.get(precision, "float32"))
keras.utils.set_random_seed(0)
model = resnet50(size, 1000)
opt = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
opt.build(model.trainable_variables)
rng = np.random.RandomState(0)
x = tf.constant(rng.standard_normal((batch, size, size, 3)).astype(np.float32))
y = tf.constant(rng.randint(0, 1000, size=(batch,)).astype(np.int32))


@tf.function(jit_compile=compiled)
def train_step():
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        total = loss + 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
    grads = tape.gradient(total, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for _ in range(warmup):
    loss = train_step()
loss.numpy()
start = time.perf_counter()
done, chunk = 0, steps
while True:
    for _ in range(chunk):
        loss = train_step()
    value = float(loss.numpy())
    done += chunk
    elapsed = time.perf_counter() - start
    if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
        break
    chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
assert np.isfinite(value)
print(json.dumps({"throughput": batch * done / elapsed, "loss": value}))
