"""A stand-in for torch in CI (no GPU): just enough of torch.cuda for the client.

Tests steer it through `torch.cuda.state`; `torch.cuda.state.calls` lists every
torch.cuda function the client called, by name, so a test can assert what was
(never) called.
"""

import functools
import time

__version__ = "2.11.0+fake"


class version:  # noqa: N801
    cuda = "13.0"


class _State:
    def __init__(self):
        self.reset()

    def reset(self):
        self._allocated = 3 << 30
        self.reserved = 5 << 30
        self.peak = 3 << 30
        # Every torch.cuda function called, in order.
        self.calls = []
        # What memory_snapshot() returns (a list of segments, as torch's {"segments": ...}).
        self.segments = []
        self.snapshot_delay_s = 0.0
        self.empty_cache_calls = 0
        self.initialized = True
        self.event_delay_s = 0.0
        # Every way the client could wait for the GPU: a span must use none of them.
        self.synchronize_calls = 0
        # Every event created, oldest first.
        self.events = []

    @property
    def allocated(self):
        return self._allocated

    @allocated.setter
    def allocated(self, value):
        # As the caching allocator does: the peak follows every allocation until someone resets it.
        self._allocated = value
        self.peak = max(self.peak, value)


class _Props:
    def __init__(self, index):
        self.uuid = f"5140da5b-0000-4000-8000-{index:012x}"
        self.name = "Fake GPU"


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None
        cuda.state.events.append(self)

    def record(self, stream=None):
        self.t = time.perf_counter()

    def query(self):
        return self.t is not None and time.perf_counter() - self.t >= cuda.state.event_delay_s

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0

    def synchronize(self):
        cuda.state.synchronize_calls += 1
        while not self.query():
            time.sleep(0.001)


class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch.cuda"


class cuda:  # noqa: N801
    state = _State()
    Event = _Event
    OutOfMemoryError = OutOfMemoryError

    @staticmethod
    def memory_snapshot():
        time.sleep(cuda.state.snapshot_delay_s)
        return {"segments": list(cuda.state.segments), "device_traces": [[]]}

    @staticmethod
    def synchronize(device=None):
        cuda.state.synchronize_calls += 1

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return cuda.state.initialized

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def current_stream(device=None):
        return None

    @staticmethod
    def get_device_properties(index):
        return _Props(index)

    @staticmethod
    def memory_allocated(device=None):
        return cuda.state.allocated

    @staticmethod
    def max_memory_allocated(device=None):
        return cuda.state.peak

    @staticmethod
    def reset_peak_memory_stats(device=None):
        cuda.state.peak = cuda.state.allocated

    @staticmethod
    def memory_stats(device=None):
        s = cuda.state
        return {
            "allocated_bytes.all.current": s.allocated,
            "allocated_bytes.all.peak": s.peak,
            "reserved_bytes.all.current": s.reserved,
            "reserved_bytes.all.peak": s.reserved,
            "active_bytes.all.current": s.allocated,
            "inactive_split_bytes.all.current": 1 << 20,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    @staticmethod
    def empty_cache():
        cuda.state.empty_cache_calls += 1
        cuda.state.reserved = cuda.state.allocated


def _recorded(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cuda.state.calls.append(name)
        return fn(*args, **kwargs)

    return staticmethod(wrapper)


# Every function of torch.cuda records its calls in cuda.state.calls.
for _name, _value in list(vars(cuda).items()):
    if isinstance(_value, staticmethod):
        setattr(cuda, _name, _recorded(_name, _value.__func__))
