# Runs out of memory in training (the allocator's message, as torch raises it), not in a forward
# without gradients.
import torch
import torch.nn as nn


class Hungry(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, num_classes))

    def forward(self, x):
        if torch.is_grad_enabled():
            raise RuntimeError("CUDA out of memory. Tried to allocate 96.00 GiB (GPU 0; 79.10 GiB "
                               "total capacity)")
        return self.net(x)


def build(num_classes):
    return Hungry(num_classes)
