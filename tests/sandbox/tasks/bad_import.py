import torch
import this_module_does_not_exist  # noqa: F401


class Model(torch.nn.Module):
    pass
