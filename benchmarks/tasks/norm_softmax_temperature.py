"""Softmax with a temperature: softmax(x / T)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.softmax(x / self.temperature, dim=-1)


rows = 16384
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [0.7]
