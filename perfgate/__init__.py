"""perfgate: a pytest plugin that gates distributed PyTorch training performance against baselines.

Importing the package imports neither pytest nor torch: workloads running under torchrun import
``perfgate.records`` and ``perfgate.openclip_log`` from it.
"""

__version__ = "0.1.0"
