"""The pieces a worker trains with, each built from its config group: models, data,
optimizer and learning-rate scaling, precision, DDP wrapping, FLOP counting."""
