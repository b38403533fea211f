"""loom as a torch.distributed backend.

``import loom_torch`` registers the backend ``"loom"``; then
``torch.distributed.init_process_group("loom", ...)`` and
``torch.distributed.new_group(ranks, backend="loom")`` use loom's
collectives on CPU tensors. See docs/PYTORCH.md.
"""
import torch.distributed as dist

from loom_torch._C import ProcessGroupLoom, create_process_group, version

BACKEND = "loom"


def _register():
    # Importing twice (or from two packages) must not register twice.
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_process_group)


_register()

__all__ = ["BACKEND", "ProcessGroupLoom", "create_process_group", "version"]
