import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features))
        self.bias = nn.Parameter(torch.empty(features))

    def forward(self, x):
        out = torch.empty_like(x)
        lib.scale_bias(x, self.weight, self.bias, out, x.shape[0], x.shape[1])
        return out
