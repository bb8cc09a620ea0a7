"""Case validation and identity."""

import pytest

from dlperf.spec import Case, SpecError

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def test_defaults_follow_dlperf_methodology():
    case = Case(framework="torch", model="resnet50", batch_size=16)
    assert (case.warmup_steps, case.steps, case.repeats) == ("auto", 100, 7)
    assert case.knobs == {"image_size": 224, "num_classes": 1000, "max_blocks": 6}
    assert case.global_batch == 16


def test_key_is_stable_and_ignores_repeat_count():
    a = Case(framework="torch", model="resnet50", batch_size=16, repeats=7)
    b = Case(framework="torch", model="resnet50", batch_size=16, repeats=3,
             knobs={"image_size": 224})
    c = Case(framework="torch", model="resnet50", batch_size=32)
    assert a.key() == b.key() != c.key()
    assert Case.from_dict(a.to_dict()) == a


def test_a_knob_added_later_leaves_earlier_identities_as_they_were():
    """VGG's classifier_width came after VGG results were stored: at its default a case's key
    is the one it had before (no such knob in its identity); any other width is a new case."""
    before = Case(framework="torch", model="vgg16", batch_size=2, knobs={"image_size": 32})
    assert "classifier_width" not in before.identity()["knobs"]
    assert before.knobs["classifier_width"] == 4096
    same = Case(framework="torch", model="vgg16", batch_size=2,
                knobs={"image_size": 32, "classifier_width": 4096})
    narrow = Case(framework="torch", model="vgg16", batch_size=2,
                  knobs={"image_size": 32, "classifier_width": 64})
    assert before.key() == same.key() != narrow.key()
    bert = Case(framework="torch", model="bert-base", batch_size=2, knobs={"hidden": 4096,
                                                                          "heads": 16})
    assert bert.identity()["knobs"]["hidden"] == 4096  # another model's knob of another name
    # ResNet-50's max_blocks (2026-12-01) likewise: every ResNet-50 stored before keeps its key
    # (this one's, computed before the knob existed), a cut network is a case of its own
    resnet = Case(framework="torch", model="resnet50", batch_size=16)
    assert "max_blocks" not in resnet.identity()["knobs"] and resnet.knobs["max_blocks"] == 6
    assert resnet.key() == "a3197d8deceeceb0"
    cut = Case(framework="torch", model="resnet50", batch_size=16, knobs={"max_blocks": 1})
    assert cut.key() != resnet.key() and cut.identity()["knobs"]["max_blocks"] == 1


@pytest.mark.parametrize("fields, message", [
    ({"framework": "caffe"}, "framework: 'caffe' is not one of"),
    ({"model": "vgg99"}, "model: 'vgg99' is not one of"),
    ({"precision": "fp8"}, "precision: 'fp8' is not one of"),
    ({"batch_size": 0}, "batch_size: 0 must be an integer >= 1"),
    ({"steps": 1}, "steps: 1 must be an integer >= 2"),
    ({"knobs": {"seq_len": 16}}, "seq_len: not a knob of model resnet50"),
    ({"knobs": {"image_size": -3}}, "image_size: -3 must be an integer >= 1"),
])
def test_bad_fields_name_the_field_and_what_is_allowed(fields, message):
    base = {"framework": "torch", "model": "resnet50", "batch_size": 2}
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        Case.from_dict({**base, **fields})


def test_unknown_field():
    with pytest.raises(SpecError, match="unknown case field 'colour'"):
        Case.from_dict({"framework": "torch", "model": "resnet50", "batch_size": 2,
                        "colour": "red"})


@pytest.mark.parametrize("value", ["soon", 0, -3, 2.5, True])
def test_warmup_steps_is_auto_or_a_positive_count(value):
    with pytest.raises(SpecError, match="warmup_steps"):
        Case(framework="torch", model="resnet50", batch_size=16, warmup_steps=value)
