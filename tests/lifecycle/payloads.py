"""The capture the lifecycle tests share: one retained pinned payload copied to the device."""

import weakref

import numpy as np


def capture_payload(p, graph_id, stream, dst, value):
    """Graph ``graph_id`` of provider ``p`` copies a retained pinned payload of ``value`` into
    ``dst``; returns a weak reference to the payload buffer."""
    with p.capture(graph_id, stream=stream) as cap:
        buf = cap.stage(np.full(dst.shape, value, np.float32))
        cap.copy_to_device(dst, buf)
    return weakref.ref(buf)
