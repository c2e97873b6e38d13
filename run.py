"""linkbench's entrypoint: `python run.py [group=option ...]`, or `-m` for a sweep.

Each Hydra job starts its own world of DDP worker processes and returns its global
samples/s, so Hydra's sweepers can optimise it. Everything else lives in src/linkbench.
"""

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from linkbench.config import hydra_errors
from linkbench.config.overrides import argument_problem, command_line_overrides
from linkbench.config.registry import group_names, register
from linkbench.config.schema import Config
from linkbench.errors import ConfigError, JobInterrupted, end, refuse
from linkbench.launcher import interrupt

ROOT = Path(__file__).resolve().parent
register(project_root=ROOT)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from linkbench.launcher.forkserver import start_early

    start_early(os.environ)  # the workers' forkserver imports torch beside this process
    from linkbench.launcher.job import run_job  # torch: not for --help or --cfg

    return run_job(cfg)


if __name__ == "__main__":
    interrupt.listen()  # a Ctrl-C swallowed where Python raised it still stops the job
    arguments = command_line_overrides(sys.argv[1:])
    hydra_errors.install(arguments)  # Hydra's own errors on bad input: one sentence each
    try:  # before Hydra, whose hint would say "+key" and whose last override wins
        problem = argument_problem(arguments, Config, group_names(ROOT))
    except ConfigError as error:  # a sweep Hydra's sweeper cannot expand
        problem = str(error)
    if problem:
        refuse(ConfigError(problem))
    try:
        main()
    except KeyboardInterrupt:  # outside any job: while Hydra composes, or between rounds
        logging.disable(logging.INFO)  # torch's at-exit lines, left on by an import cut short
        said = "stopped by SIGINT (Ctrl-C) outside any job; jobs that completed keep their results"
        end(JobInterrupted(said), 130)
