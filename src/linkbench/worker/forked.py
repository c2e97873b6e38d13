"""Imported last by the forkserver the workers fork from (``PRELOAD`` in
:mod:`linkbench.launcher.forkserver`), and by nothing else.

The launcher starts that server with SIGINT blocked, so that a Ctrl-C during its seconds of
imports (torch) neither ends it nor prints a traceback of those imports beside the job's
console (the launcher and the workers have their own). The server keeps it blocked (a Ctrl-C
is the launcher's to handle; the server ignores SIGINT once its imports are done), and every
process it forks unblocks it at once: a worker stops on Ctrl-C with Python's own handler,
which the server gives back to the processes it forks."""

import os
import signal

os.register_at_fork(
    after_in_child=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
)
