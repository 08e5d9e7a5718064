"""Per-task block counts (``daisy.task_state`` in daisy 1.x), computed by
the Rust scheduler; see `TaskState`."""

from daisy._daisy import TaskState

__all__ = ["TaskState"]
