# A user's model for track 3 --framework torch: build(num_classes) returns an nn.Module.
import torch.nn as nn


def build(num_classes):
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, num_classes))


def grey(num_classes):
    return nn.Sequential(nn.Conv2d(1, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, num_classes))
