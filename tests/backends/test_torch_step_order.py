"""The torch backend's training step keeps the previous step's gradients through the forward and
drops them before the backward (torchvision's reference order), each step's gradient its own.

Freed before the forward, the gradients' blocks went to the activations and, on a CPU, the new
gradients came from fresh pages every step: the compiled ResNet-50 ran 4 % slower than the
independent loop (docs/fidelity.md, Compiled modes).
"""



def test_gradients_are_dropped_after_the_forward_each_step_its_own():
    # torch imported here, not when pytest collects the file: every pytest process collects it
    import torch
    import torch.nn.functional as F
    from torch import nn

    from dlperf.backends.torch.workload import Precision, TorchWorkload

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    grads_during_forward = []
    model.register_forward_pre_hook(
        lambda module, args: grads_during_forward.append(module.weight.grad is not None))
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    device = torch.device("cpu")
    workload = TorchWorkload(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             forward_loss=lambda m: F.cross_entropy(m(x), y),
                             precision=Precision("fp32", device, train=True), device=device,
                             samples_per_step=3, params=10)
    workload.step()
    workload.step()
    assert grads_during_forward == [False, True]  # the first step has none yet

    expected = torch.autograd.grad(F.cross_entropy(model(x), y), model.weight)[0]
    workload.step()
    assert torch.allclose(model.weight.grad, expected)  # not accumulated onto the last one
