# Does not import: a module that is not there.
import torch
import no_such_module_for_pipebench  # noqa: F401


def build():
    return torch.nn.Identity()
