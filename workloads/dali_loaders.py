"""DALI input pipelines for the workloads: the augmentation runs inside DALI, not in Python.

With ``device_id=None`` a pipeline uses CPU operators only (it runs on machines without a GPU, and
``DALIGenericIterator`` yields CPU tensors); with a device id the data moves to the GPU after
reading and the augmentation runs there, as in the SC21 tutorial's DALI loader.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIGenericIterator

SPATIAL_PERMUTATIONS = ((1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1))
"""Orders of a CDHW volume's spatial axes: with random flips, every rotation and reflection of the cube."""


class _RandomPictures:
    """External source: one random uint8 HWC picture and label per sample, reproducible from the seed."""

    def __init__(self, side: int, seed: int) -> None:
        self.side, self.seed = side, seed

    def __call__(self, info) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng((self.seed, info.idx_in_epoch))
        picture = rng.integers(0, 256, (self.side, self.side, 3), dtype=np.uint8)
        return picture, np.array([rng.integers(0, 1000)], dtype=np.int64)


@pipeline_def
def _image_pipeline(source_side: int, image_size: int, mean: Sequence[float], std: Sequence[float], source_seed: int,
                    gpu: bool):
    pictures, labels = fn.external_source(source=_RandomPictures(source_side, source_seed), num_outputs=2,
                                          batch=False, layout=["HWC", ""], dtype=[types.UINT8, types.INT64])
    if gpu:
        pictures = pictures.gpu()
    images = fn.random_resized_crop(pictures, size=(image_size, image_size))
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=list(mean), std=list(std),
                                      mirror=fn.random.coin_flip())
    return images, labels


def image_batches(*, batch_size: int, image_size: int, source_side: int, threads: int, seed: int,
                  device_id: int | None, batches: int, mean: Sequence[float], std: Sequence[float]) -> Iterator:
    """``batches`` batches of (images NCHW float32, labels N int64): random resized crop, flip, normalize."""
    pipe = _image_pipeline(source_side, image_size, mean, std, seed, device_id is not None,
                           batch_size=batch_size, num_threads=threads, device_id=device_id, seed=seed)
    pipe.build()
    for out in itertools.islice(DALIGenericIterator([pipe], ["images", "labels"]), batches):
        yield out[0]["images"], out[0]["labels"].reshape(-1)


@pipeline_def(enable_conditionals=True)
def _volume_pipeline(input_path: str, target_path: str, side: int, crop: int, gpu: bool):
    start = fn.random.uniform(values=list(range(side - crop + 1)), shape=[3], dtype=types.INT32)
    window = {"roi_start": start, "roi_shape": [crop] * 3, "roi_axes": [1, 2, 3]}
    inp = fn.readers.numpy(files=[input_path], **window)
    tar = fn.readers.numpy(files=[target_path], **window)
    if gpu:
        inp, tar = inp.gpu(), tar.gpu()
    inp, tar = fn.reshape(inp, layout="CDHW"), fn.reshape(tar, layout="CDHW")
    flips = {axis: fn.random.coin_flip() for axis in ("depthwise", "vertical", "horizontal")}
    inp, tar = fn.flip(inp, **flips), fn.flip(tar, **flips)
    choice = fn.random.uniform(values=list(range(len(SPATIAL_PERMUTATIONS))), dtype=types.INT32)
    for index, order in enumerate(SPATIAL_PERMUTATIONS[1:], 1):
        if choice == index:
            inp = fn.transpose(inp, perm=[0, *order], transpose_layout=False)
            tar = fn.transpose(tar, perm=[0, *order], transpose_layout=False)
    return inp, tar


def volume_batches(paths: tuple[Path, Path], *, batch_size: int, crop: int, threads: int, seed: int,
                   device_id: int | None, batches: int) -> Iterator:
    """``batches`` batches of (input, target) random crops, rotated and reflected alike, NCDHW float32."""
    side = int(np.load(paths[0], mmap_mode="r").shape[1])
    pipe = _volume_pipeline(str(paths[0]), str(paths[1]), side, crop, device_id is not None,
                            batch_size=batch_size, num_threads=threads, device_id=device_id, seed=seed)
    pipe.build()
    for out in itertools.islice(DALIGenericIterator([pipe], ["input", "target"]), batches):
        yield out[0]["input"], out[0]["target"]
