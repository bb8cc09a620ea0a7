"""What every model family of the catalogue shares: the :class:`ModelSpec` entry, the ``Conv``
record the convolutional families count with, and the knob checks and input shapes that more
than one family uses.

Standard library only; valid Python 3.7 (see the package's docstring).
"""

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

Knobs = Dict[str, int]

Conv = NamedTuple(
    "Conv",
    [
        ("name", str),
        ("c_in", int),
        ("c_out", int),
        ("kernel", int),
        ("stride", int),
        ("size_in", int),
        ("size_out", int),
    ],
)

#: Knobs of an image classifier when the user sets none.
IMAGE_DEFAULTS = {"image_size": 224, "num_classes": 1000}

#: Knobs that may be 0 (a switch such as clip_grad_norm=0); every other knob is >= 1.
ZERO_ALLOWED_KNOBS = ("clip_grad_norm",)


def conv_out(size, kernel, stride, padding):
    # type: (int, int, int, int) -> int
    """Output side of a convolution over a square map of side ``size``."""
    return (size + 2 * padding - kernel) // stride + 1


def check_positive(k, names):
    # type: (Mapping[str, int], Sequence[str]) -> None
    for name in names:
        if k[name] < 1:
            raise ValueError("%s must be positive, got %d" % (name, k[name]))


def check_transformer(k, names, too_short):
    # type: (Mapping[str, int], Sequence[str], str) -> None
    """Knob check of a transformer (BERT, GPT): positive sizes, heads that divide the width, a
    sequence that fits the position table and is long enough (``too_short`` says why), a
    clip that is 0 (off) or a norm."""
    check_positive(k, names)
    if k["hidden"] % k["heads"]:
        raise ValueError("hidden (%d) must be divisible by heads (%d)" % (k["hidden"], k["heads"]))
    if k["seq_len"] > k["max_positions"]:
        raise ValueError(
            "seq_len (%d) exceeds max_positions (%d)" % (k["seq_len"], k["max_positions"]))
    if k["seq_len"] < 2:
        raise ValueError(too_short)
    if k["clip_grad_norm"] < 0:
        raise ValueError("clip_grad_norm must be 0 (no clipping) or a positive global norm, got %d"
                         % k["clip_grad_norm"])


def image_inputs(k):
    # type: (Mapping[str, int]) -> Dict[str, Tuple[int, ...]]
    """Per-sample inputs of an image model: a 3-channel square image and a class label."""
    return {"image": (3, k["image_size"], k["image_size"]), "label": ()}


class ImageTooSmall(ValueError):
    """A layer of the network would see a map smaller than its window."""


def _smallest_image(convs_fn):
    # type: (Callable[[int], Any]) -> int
    size = 1
    while True:
        try:
            convs_fn(size)
            return size
        except ImageTooSmall:
            size += 1


def vision_check(convs_fn, model):
    # type: (Optional[Callable[[int], Any]], str) -> Callable[[Mapping[str, int]], None]
    """Knob check of an image classifier: classes >= 2, and an image every layer can take."""
    def check(k):
        # type: (Mapping[str, int]) -> None
        if k["num_classes"] < 2:
            raise ValueError("num_classes must be at least 2, got %d" % k["num_classes"])
        if k["image_size"] < 1:
            raise ValueError("image_size must be positive, got %d" % k["image_size"])
        if convs_fn is None:
            return
        try:
            convs_fn(k["image_size"])
        except ImageTooSmall as error:
            raise ValueError(
                "image_size %d is too small for %s: %s would get an empty map; the smallest "
                "image_size it takes is %d" % (k["image_size"], model, error,
                                                _smallest_image(convs_fn)))
    return check


class ModelSpec(object):
    """One catalogue entry; every method accepts partial knobs and fills in the defaults."""

    def __init__(
        self,
        name,  # type: str
        kind,  # type: str
        description,  # type: str
        defaults,  # type: Knobs
        params_fn,  # type: Callable[[Mapping[str, int]], int]
        flops_fn,  # type: Callable[[Mapping[str, int]], float]
        check_fn,  # type: Callable[[Mapping[str, int]], None]
        inputs_fn,  # type: Callable[[Mapping[str, int]], Dict[str, Tuple[int, ...]]]
        activations_fn=None,  # type: Optional[Callable[[Mapping[str, int]], float]]
        tensors_fn=None,  # type: Optional[Callable[[Mapping[str, int]], int]]
    ):
        # type: (...) -> None
        self.name = name
        self.kind = kind
        self.description = description
        self.defaults = dict(defaults)
        self.knobs = tuple(defaults)  # every knob has a default, so they are the settable ones
        self.minimums = {name: 0 for name in ZERO_ALLOWED_KNOBS if name in self.defaults}
        self._params_fn = params_fn
        self._flops_fn = flops_fn
        self._check_fn = check_fn
        self._inputs_fn = inputs_fn
        self._activations_fn = activations_fn
        self._tensors_fn = tensors_fn

    def resolve(self, overrides=None):
        # type: (Optional[Mapping[str, Any]]) -> Knobs
        """Defaults merged with the non-None overrides, validated.

        Unknown knob names and impossible values raise here, with the allowed names, rather than
        deep inside a framework where the message would be about tensor shapes.
        """
        knobs = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key not in self.defaults:
                raise KeyError(
                    "model %s has no knob %r; allowed: %s"
                    % (self.name, key, ", ".join(self.knobs))
                )
            if isinstance(value, bool) or int(value) != value:
                raise ValueError("knob %s must be an integer, got %r" % (key, value))
            knobs[key] = int(value)
        self._check_fn(knobs)
        return knobs

    def params(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> int
        """Trainable parameters of the network as every backend must build it."""
        return self._params_fn(self.resolve(knobs))

    def gradient_tensors(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> Optional[int]
        """How many trainable tensors (so gradients) the network has as the catalogue lays it out
        (a backend that fuses, e.g. BERT's query, key and value into one, has fewer): the count
        of all-reduces of an engine that sends one per gradient; None where the model does not
        count them."""
        if self._tensors_fn is None:
            return None
        return self._tensors_fn(self.resolve(knobs))

    def flops_per_sample(self, knobs=None, train=True):
        # type: (Optional[Mapping[str, Any]], bool) -> float
        """Analytic FLOPs for one sample; a training step counts 3 x the forward pass."""
        forward = self._flops_fn(self.resolve(knobs))
        return 3.0 * forward if train else forward

    def activations_per_sample(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> Optional[float]
        """Elements of the forward pass's layer outputs for one sample (what a training step
        keeps for backward), for the roofline's estimate of bytes moved; None where the
        catalogue does not count them."""
        if self._activations_fn is None:
            return None
        return self._activations_fn(self.resolve(knobs))

    def input_shapes(self, knobs=None):
        # type: (Optional[Mapping[str, Any]]) -> Dict[str, Tuple[int, ...]]
        """Per-sample shape of each synthetic input, so every backend feeds the same data."""
        return self._inputs_fn(self.resolve(knobs))

    def __repr__(self):
        # type: () -> str
        return "ModelSpec(%r, kind=%r)" % (self.name, self.kind)


def vision_spec(name, description, params_fn, flops_fn, convs_fn=None, defaults=IMAGE_DEFAULTS):
    # type: (str, str, Callable[[Mapping[str, int]], int], Callable[[Mapping[str, int]], float], Optional[Callable[[int], List[Conv]]], Mapping[str, int]) -> ModelSpec
    """An image classifier's entry; ``convs_fn`` where the network has a smallest image;
    ``defaults``: its knobs (the image's two, and any of its own)."""
    return ModelSpec(name, "vision", description, defaults, params_fn, flops_fn,
                     vision_check(convs_fn, name), image_inputs,
                     conv_activations(convs_fn) if convs_fn is not None else None)


#: tensors a convolution's output becomes on its way forward: itself, normalised, activated
CONV_OUTPUT_TENSORS = 3


def conv_activations(convs_fn):
    # type: (Callable[[int], List[Conv]]) -> Callable[[Mapping[str, int]], float]
    """Activation elements per sample of a convolutional network: each convolution's output
    map, as convolved, normalised and activated."""
    def activations(k):
        # type: (Mapping[str, int]) -> float
        return activation_elements(convs_fn(k["image_size"]))
    return activations


def activation_elements(convs):
    # type: (Sequence[Conv]) -> float
    """Activation elements per sample of these convolutions' output maps (see above)."""
    return float(CONV_OUTPUT_TENSORS * sum(c.c_out * c.size_out * c.size_out for c in convs))
