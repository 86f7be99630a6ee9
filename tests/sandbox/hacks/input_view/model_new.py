import kwrt
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def forward(self, x):
        lib.relu(x, x, x.numel())  # in place: "fast", no allocation
        return x.view(-1)
