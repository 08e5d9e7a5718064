"""A client asks for a block."""

from .message import Message


class AcquireBlock(Message):
    """A client asks for the next block of task ``task_id``.

    Args:
        task_id: the task's id.
    """

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
