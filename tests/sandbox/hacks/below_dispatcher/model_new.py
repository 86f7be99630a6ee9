import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, x.shape[0], x.shape[1], kwrt.stream())
        return out
