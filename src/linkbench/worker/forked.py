"""Imported last by the forkserver the workers fork from (``PRELOAD`` in
:mod:`linkbench.launcher.forkserver`), and by nothing else.

The launcher starts that server with SIGINT ignored, so that a Ctrl-C during its seconds of
imports (torch) neither ends it nor prints a traceback of those imports beside the job's
console (the launcher and the workers have their own). Here, its imports done, the server
takes Python's own handler back: the one it gives every worker it forks (it ignores SIGINT
itself from now on)."""

import signal

signal.signal(signal.SIGINT, signal.default_int_handler)
