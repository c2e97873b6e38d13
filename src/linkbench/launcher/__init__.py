"""Runs in the launching process (run.py's): a Hydra job from plan to result.json.

Starts each job's world of workers, tells which rank failed first, keeps the job's record,
writes its TensorBoard summary and, through Hydra callbacks, the sweep's.

Data path: config -> **launcher** -> worker -> files -> analysis.
"""
