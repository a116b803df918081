"""A folder dataset's identity in the cache: what DataLoader reads now is what SenecaLoader
serves, bit for bit, whatever the cache holds from before (files rewritten in place at their
size, files added, removed or renamed, a class renamed, the same folder through a symlink, a
copy with or without its files' times)."""

import os
import shutil

import numpy as np
import pytest
import torch
from helpers.dataloader import same_as_dataloader
from PIL import Image, ImageOps
from torchvision import datasets
from torchvision.transforms import v2

from seneca import ConfigError, SenecaLoader
from seneca._bench.synthetic import make_dataset

N = 8


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "images"
    make_dataset(root, N, 2, size=(16, 12), progress=False, workers=1)
    return root


def _folder(root):
    return datasets.ImageFolder(str(root), transform=v2.PILToTensor())


def _load_npy(path):
    return torch.from_numpy(np.load(path))


def test_arrays_rewritten_in_place_at_their_size_are_read_again(tmp_path, redis_url):
    root = tmp_path / "arrays"
    for k in range(N):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        np.save(root / f"c{k % 2}" / f"{k}.npy", np.full((3, 4), k, dtype=np.int64))

    def ds():
        return datasets.DatasetFolder(str(root), loader=_load_npy, extensions=(".npy",))

    assert same_as_dataloader(ds(), redis_url) == N  # the second epoch from the cache
    for path in sorted(root.rglob("*.npy")):  # other values, the same size, a later time
        st = os.stat(path)
        np.save(path, np.load(path) + 100)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert os.path.getsize(path) == st.st_size
    assert same_as_dataloader(ds(), redis_url) == N  # read again, not the old values


def _upright(img):
    return ImageOps.exif_transpose(img)


def test_a_photo_cached_decoded_is_turned_upright_by_its_exif_orientation(tmp_path, redis_url):
    """What a transform reads from an image besides its pixels (here the EXIF orientation that
    ``ImageOps.exif_transpose`` applies, as for phone photos) is kept with the cached decoded
    image: a cached image without it came out on its side."""
    root = tmp_path / "photos"
    rng = np.random.default_rng(0)
    for k in range(N):
        (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        exif = Image.Exif()
        exif[0x0112] = 6  # orientation: rotated 90 degrees
        pixels = rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"c{k % 2}" / f"{k}.jpg", exif=exif)
    ds = datasets.ImageFolder(str(root), transform=v2.Compose([_upright, v2.PILToTensor()]))
    assert ds[0][0].shape == (3, 16, 12)  # upright: the 16 x 12 image stands on its side
    assert same_as_dataloader(ds, redis_url) == N  # the second epoch's decoded images cached


def test_files_added_removed_renamed_and_a_class_renamed(images, redis_url):
    assert same_as_dataloader(_folder(images), redis_url) == N
    first = sorted((images / "class_000").iterdir())
    shutil.copy2(first[0], images / "class_001" / "added.jpg")  # added
    assert same_as_dataloader(_folder(images), redis_url) == N + 1
    first[1].unlink()  # removed
    assert same_as_dataloader(_folder(images), redis_url) == N
    first[2].rename(first[2].with_name("renamed.jpg"))  # renamed
    assert same_as_dataloader(_folder(images), redis_url) == N
    (images / "class_000").rename(images / "class_zzz")  # a class renamed: labels move
    assert same_as_dataloader(_folder(images), redis_url) == N


def test_the_same_folder_through_a_symlink_shares_its_values(images, tmp_path, redis_url):
    assert same_as_dataloader(_folder(images), redis_url) == N
    link = tmp_path / "link"
    link.symlink_to(images, target_is_directory=True)
    assert same_as_dataloader(_folder(link), redis_url) == 0  # the same files, cached


def test_a_copy_shares_only_with_its_times_or_a_version_both_give(images, tmp_path, redis_url):
    assert same_as_dataloader(_folder(images), redis_url) == N
    kept = tmp_path / "kept"
    shutil.copytree(images, kept)  # copied with its times (cp -p, rsync -a)
    assert same_as_dataloader(_folder(kept), redis_url) == 0
    bare = tmp_path / "bare"
    shutil.copytree(images, bare, copy_function=shutil.copy)  # times not kept: never inferred
    assert same_as_dataloader(_folder(bare), redis_url) == N
    assert same_as_dataloader(_folder(images), redis_url, dataset_version="v1") == N
    assert same_as_dataloader(_folder(bare), redis_url, dataset_version="v1") == 0  # vouched
    other = tmp_path / "other"  # the same names, other images: a version does not hide sizes
    make_dataset(other, N, 2, size=(20, 14), progress=False, workers=1)
    assert same_as_dataloader(_folder(other), redis_url, dataset_version="v1") == N


def test_a_bad_dataset_version_names_the_option(images, redis_url):
    with pytest.raises(ConfigError, match="dataset_version"):
        SenecaLoader(_folder(images), cache=redis_url, dataset_version="")
