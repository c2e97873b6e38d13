"""A job's TensorBoard run across attempts: one clean curve, however often the job ran.

A job run again (``resume=true`` after a failure, a stop or a kill) writes into the same run
(its directory). Before its workers start, the launching process makes the files of the
earlier attempt agree with where this one starts: started over, the earlier events go; resumed
from the checkpoint of step N, every earlier event after step N goes (and the earlier text and
record, which this attempt writes again). The files themselves are rewritten, with
TensorBoard's own reader and record writer, so every reader (TensorBoard's Python loader, its
Rust data server, a script) sees one curve; TensorBoard's ``purge_step`` is applied by its
Python loader only, and not on a run's first ``SessionLog.START``.
"""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter

from linkbench.files import EVENTS_GLOB, RECORD_EVENTS_SUFFIX, replace_atomically

# What each attempt writes again: the config and hardware as text.
REWRITTEN_PLUGINS = ("text",)


def _kept(event: Event, through_step: int) -> bool:
    if event.step > through_step:
        return False
    if event.HasField("summary"):
        plugins = {v.metadata.plugin_data.plugin_name for v in event.summary.value}
        return not plugins & set(REWRITTEN_PLUGINS)
    return True


def keep_earlier_events(job_dir: Path, through_step: int | None) -> int:
    """Make the job's earlier TensorBoard files hold only what this attempt does not write
    again: the events up to ``through_step`` (the checkpoint it resumes from), none when it
    starts over (None). Returns the events removed."""
    removed = 0
    for path in sorted(job_dir.glob(EVENTS_GLOB)):
        records = list(RawEventFileLoader(str(path)).Load())
        if through_step is None or path.name.endswith(RECORD_EVENTS_SUFFIX):
            path.unlink(missing_ok=True)
            removed += len(records)
            continue
        events = [Event.FromString(r) for r in records]
        kept = [e for e in events if e.HasField("file_version") or _kept(e, through_step)]
        if len(kept) == len(events):
            continue
        removed += len(events) - len(kept)

        def write(tmp: Path, events: list[Event] = kept) -> None:
            with tmp.open("wb") as handle:
                writer = RecordWriter(handle)
                for event in events:
                    writer.write(event.SerializeToString())
                writer.flush()

        replace_atomically(path, write)
    return removed
