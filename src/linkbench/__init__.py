"""linkbench: declarative experiments on what the GPU interconnect, precision and batch size
do to DistributedDataParallel training."""

__version__ = "0.1.0"
