"""AdamW for Gluon's Trainer, with ``torch.optim.AdamW``'s arithmetic.

MXNet 1.9.1 ships the fused ``_adamw_update`` / ``_multi_adamw_update`` operators but no AdamW
optimizer class (its ``Adam`` adds weight decay to the gradient, which is L2, not decoupled
decay). The operators compute, per weight::

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w = w - eta * (lr_op * m / (sqrt(v) + eps_op) + wd_op * w)

PyTorch's AdamW (with bias correction c1 = 1 - b1^t, c2 = 1 - b2^t) is::

    w = w - lr * wd * w - lr / c1 * m / (sqrt(v) / sqrt(c2) + eps)

which is the same update with eta = 1, lr_op = lr sqrt(c2) / c1, eps_op = eps sqrt(c2) and
wd_op = lr * wd. Weights are updated in groups of ``aggregate_num`` by the multi-tensor operator,
as MXNet's own SGD does (``MXNET_OPTIMIZER_AGGREGATION_SIZE``, default 4).
"""

import math
import os
from typing import Any, Dict, List, Tuple

from mxnet import nd
from mxnet.optimizer import Optimizer


class AdamW(Optimizer):
    def __init__(self, learning_rate=1e-4, beta1=0.9, beta2=0.999, epsilon=1e-8, wd=0.01,
                 **kwargs):
        # type: (float, float, float, float, float, **Any) -> None
        super(AdamW, self).__init__(learning_rate=learning_rate, wd=wd, **kwargs)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.aggregate_num = max(1, int(os.getenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "4")))
        self._rescale = {}  # type: Dict[Any, Tuple[float, Any]]

    def create_state(self, index, weight):
        # type: (Any, Any) -> Any
        return (nd.zeros(weight.shape, weight.context, dtype=weight.dtype),   # first moment
                nd.zeros(weight.shape, weight.context, dtype=weight.dtype))   # second moment

    def _rescale_grad(self, context):
        # type: (Any) -> Any
        """The operators take rescale_grad as an array; made once per context and value."""
        cached = self._rescale.get(context)
        if cached is None or cached[0] != self.rescale_grad:
            cached = (self.rescale_grad, nd.full((1,), self.rescale_grad, ctx=context))
            self._rescale[context] = cached
        return cached[1]

    def update(self, index, weight, grad, state):
        # type: (Any, Any, Any, Any) -> None
        many = isinstance(index, (list, tuple))
        indices = list(index) if many else [index]
        weights = list(weight) if many else [weight]  # type: List[Any]
        grads = list(grad) if many else [grad]  # type: List[Any]
        states = list(state) if many else [state]  # type: List[Any]
        self._update_count(indices)
        lrs, wds = self._get_lrs(indices), self._get_wds(indices)
        t = self._index_update_count[indices[0]]
        c1, c2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
        correction = math.sqrt(c2) / c1
        settings = dict(beta1=self.beta1, beta2=self.beta2,
                        epsilon=self.epsilon * math.sqrt(c2), clip_gradient=-1.0)
        rescale = self._rescale_grad(weights[0].context)
        if len(weights) == 1:
            mean, var = states[0]
            nd.contrib.adamw_update(weights[0], grads[0], mean, var, rescale_grad=rescale,
                                    lr=lrs[0] * correction, eta=1.0, wd=lrs[0] * wds[0],
                                    out=weights[0], **settings)
            return
        nd.contrib.multi_adamw_update(
            weights, grads, [s[0] for s in states], [s[1] for s in states], rescale,
            lrs=[lr * correction for lr in lrs], wds=[lr * wd for lr, wd in zip(lrs, wds)],
            etas=[1.0] * len(weights), out=weights, **settings)

    def update_multi_precision(self, index, weight, grad, state):
        # type: (Any, Any, Any, Any) -> None
        self.update(index, weight, grad, state)
