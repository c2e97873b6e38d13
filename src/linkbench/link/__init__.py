"""What is link-specific: the interconnect arms' NCCL variables, the GPUs' topology, NCCL's
own logs and the transport verdict drawn from them."""
