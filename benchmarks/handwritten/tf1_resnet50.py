"""Hand-written, idiomatic TensorFlow 1.15 training loop for ResNet-50 v1.5 (graph + Session, as
NVIDIA's TF1 scripts): the baseline dlperf's tensorflow1 backend must match. The network is the
project's graph builder; the loop runs only the train op per step (the loss is fetched once,
after the window), XLA by the session config when asked.

    python tf1_resnet50.py BATCH IMAGE WARMUP STEPS fp32 {0,1} [--min-seconds S]  (prints JSON)
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
min_seconds = 0.0
if "--min-seconds" in sys.argv:  # anywhere, default 0: the timed window lasts at least this long
    _at = sys.argv.index("--min-seconds")
    min_seconds = float(sys.argv[_at + 1])
    del sys.argv[_at:_at + 2]
batch, size, warmup, steps = (int(a) for a in sys.argv[1:5])
compiled = sys.argv[6] == "1"
if compiled:
    os.environ["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from dlperf.backends.tensorflow1.resnet import resnet50  # noqa: E402

tf1 = tf.compat.v1
tf1.logging.set_verbosity(tf1.logging.ERROR)
rng = np.random.RandomState(0)
images_np = rng.standard_normal((batch, size, size, 3)).astype(np.float32)
labels_np = rng.randint(0, 1000, size=(batch,)).astype(np.int32)

tf1.set_random_seed(0)
x_in = tf1.placeholder(tf.float32, images_np.shape)
y_in = tf1.placeholder(tf.int32, labels_np.shape)
x = tf1.Variable(x_in, trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES])
y = tf1.Variable(y_in, trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES])
logits = resnet50(x, 1000, training=True)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
total = loss + 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in tf1.trainable_variables()])
with tf.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
    train_op = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(total)

config = tf1.ConfigProto()
if compiled:
    config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
with tf1.Session(config=config) as sess:
    sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()],
             feed_dict={x_in: images_np, y_in: labels_np})
    for _ in range(warmup):
        sess.run(train_op)
    start = time.perf_counter()
    done, chunk = 0, steps
    while True:
        for _ in range(chunk):
            sess.run(train_op)
        done += chunk
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:  # one pass unless --min-seconds asks for more
            break
        chunk = max(1, int((min_seconds - elapsed) * done / elapsed) + 1)  # whole steps
    value = float(sess.run(loss))
assert np.isfinite(value)
print(json.dumps({"throughput": batch * done / elapsed, "loss": value}))
