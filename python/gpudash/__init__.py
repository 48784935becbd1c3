"""Attach a PyTorch process to a gpudash dashboard.

    import gpudash
    gpudash.attach("http://gpu-server:7070", token="...")

    @gpudash.monitor
    def train_step(batch): ...

See README.md for what is sent and how remote empty_cache works.
"""

from ._allocator import oom_guard
from ._client import Attachment, attach, detach
from ._spans import monitor, span

__all__ = ["Attachment", "attach", "detach", "monitor", "oom_guard", "span"]
__version__ = "0.1.0"
