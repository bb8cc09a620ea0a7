"""What TensorFlow 1 and 2 both call a normalisation in their profiles (their ``profiling.py``),
in one place: text only, so TensorFlow 1.15's backend (Python 3.7) reads it without TF2's
profiling module (which imports TensorFlow 2).
"""

# tf.nn.moments / tf.nn.batch_normalization, and layers named as normalisation layers (bn1,
# downsample_bn, ln1, mlm_ln, batch_normalization, layer_normalization, LayerNorm), whose ops are
# otherwise plain Mul/Sub/Mean
TF_NORM_SCOPE = (r"(^|/)(moments|batchnorm)/|(^|/)([A-Za-z0-9]+_)*(bn|ln|norm|"
                 r"batch_normalization|layer_normalization|LayerNorm|BatchNorm)\d*(_\d+)*/")
