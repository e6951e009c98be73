"""The served transform's image reading: what a request hands it is never written, never warned about."""

from __future__ import annotations

import numpy as np

from driftmatrix.features import transform

CNN = {"inputs": "pixels", "modality": "image", "family": "CNN"}


def test_a_read_only_request_buffer_is_copied_and_a_writable_array_is_not():
    pixels = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    frozen = pixels.copy()
    frozen.setflags(write=False)  # what a served request's decoded buffer can be
    images = transform.as_images(frozen)
    # torch.from_numpy would warn (once per process) and share a buffer it may not write
    assert images.flags.writeable and not np.shares_memory(images, frozen)
    assert np.array_equal(images, pixels) and not frozen.flags.writeable
    assert np.shares_memory(transform.as_images(pixels), pixels)  # no copy where none is needed
    inputs = transform.model_inputs(CNN, frozen)
    assert np.array_equal(inputs.data.permute(0, 2, 3, 1).numpy(), pixels)
