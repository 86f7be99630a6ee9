import torch
import torch.nn as nn

import kwrt

lib = kwrt.load()


class ModelNew(nn.Module):
    def forward(self, x):
        lib.relu(x, x, x.numel())  # in place: "fast", no allocation
        return x.view(-1)
