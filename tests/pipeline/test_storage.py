import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest
from helpers.rewrite import made_again_keeping_times
from torchvision.datasets import ImageFolder

from seneca import defaults
from seneca.pipeline.storage import Storage
from seneca_base.errors import DatasetError


def test_from_folder_matches_imagefolder(tiny_dataset):
    ours = Storage.from_folder(tiny_dataset)
    theirs = ImageFolder(str(tiny_dataset))
    assert ours.samples == theirs.samples
    assert ours.classes == theirs.classes
    assert Storage(theirs.samples).samples == theirs.samples


def test_read_returns_file_bytes(tiny_dataset):
    s = Storage.from_folder(tiny_dataset)
    path, _ = s.samples[5]
    with open(path, "rb") as f:
        assert s.read(5) == f.read()


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetError, match=str(tmp_path / "nope")):
        Storage.from_folder(tmp_path / "nope")


def test_empty_class_folder(tmp_path, tiny_dataset):
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    (root / "zzz_empty").mkdir()
    with pytest.raises(DatasetError, match="empty class folder: .*zzz_empty"):
        Storage.from_folder(root)


def test_non_image_file(tmp_path, tiny_dataset):
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    (root / "class_001" / "notes.txt").write_text("hello")
    with pytest.raises(DatasetError, match="not an image file.*notes.txt"):
        Storage.from_folder(root)


def test_unreadable_sample_names_path(tmp_path, tiny_dataset):
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    s = Storage.from_folder(root)
    gone = s.samples[0][0]
    os.unlink(gone)
    with pytest.raises(FileNotFoundError) as caught:  # what DataLoader's read raises
        s.read(0)
    assert any(gone in note for note in caught.value.__notes__), caught.value.__notes__


def test_fingerprint_ignores_mount_point(tmp_path, tiny_dataset):
    copy = tmp_path / "elsewhere" / "data"
    shutil.copytree(tiny_dataset, copy)
    a, b = Storage.from_folder(tiny_dataset), Storage.from_folder(copy)
    assert a.fingerprint() == b.fingerprint()
    assert Storage(a.samples[:-1]).fingerprint() != a.fingerprint()


def test_fingerprint_names_the_files_sizes_and_times(tmp_path, tiny_dataset, monkeypatch, caplog):
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    before = Storage.from_folder(root).fingerprint()
    path = Storage.from_folder(root).samples[5][0]
    with open(path, "ab") as f:
        f.write(b"\0")  # the same name and label, another file
    changed = Storage.from_folder(root).fingerprint()
    assert changed != before
    os.unlink(path)  # gone: the id is still made (reading the sample names the file)
    assert Storage.from_folder(root).fingerprint() not in (before, changed)
    # a slow file system: the sizes are read in threads, to the same id
    monkeypatch.setattr(defaults, "STAT_PROBE", 4)
    monkeypatch.setattr(defaults, "STAT_SLOW_US", 0.0)
    copy = Storage.from_folder(tiny_dataset)
    with caplog.at_level(logging.DEBUG, logger="seneca"):
        threaded = copy.fingerprint()
    assert "the other 44 files looked at in 32 threads" in caplog.text
    monkeypatch.setattr(defaults, "STAT_SLOW_US", 1e9)
    assert copy.fingerprint() == threaded == before


def test_the_files_of_some_samples_are_looked_at_again_as_the_id_named_them(
    tmp_path, tiny_dataset, monkeypatch, caplog
):
    """``changed_among``: the samples among those asked whose files changed since the id was
    made, also in a copy handed to another process (a spawned worker) and where a stat takes a
    round trip (looked at in threads); nothing before an id was made."""
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    storage = Storage.from_folder(root)
    assert storage.changed_among([0, 5]) == []  # no id made
    storage.fingerprint()
    assert storage.changed_among(list(range(len(storage)))) == []
    with open(storage.path(5), "ab") as f:
        f.write(b"\0")
    os.utime(storage.path(7), ns=(1, 1))
    assert storage.changed_among([9, 7, 5, 0]) == [7, 5]
    assert pickle.loads(pickle.dumps(storage)).changed_among([5, 6]) == [5]
    monkeypatch.setattr(defaults, "STAT_SLOW_US", 0.0)  # a stat takes a round trip
    slow = Storage.from_folder(root)
    slow.fingerprint()
    os.utime(slow.path(2), ns=(1, 1))
    with caplog.at_level(logging.DEBUG, logger="seneca"):
        assert slow.changed_among(list(range(len(slow)))) == [2]
    assert f"{len(slow)} files looked at in 32 threads" in caplog.text


def test_files_made_again_with_their_old_times_put_back_are_seen_by_the_look_not_the_id(
    tmp_path, tiny_dataset
):
    """A file made again at its size with its old times put back (as ``rsync -a`` leaves it),
    and one whose metadata alone changed: the look at a batch's files sees both (a file's change
    time cannot be put back, and moves with its metadata). The id does not change: it is made of
    what copies on other machines share (a copy's change times are its own)."""
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    storage = Storage.from_folder(root)
    before = storage.fingerprint()
    made_again_keeping_times(storage.path(3))
    os.chmod(storage.path(8), 0o600)
    assert storage.changed_among([1, 3, 8]) == [3, 8]
    assert Storage.from_folder(root).fingerprint() == before


def test_a_file_rewritten_in_place_at_its_size_is_another_dataset(tmp_path, tiny_dataset):
    root = tmp_path / "d"
    shutil.copytree(tiny_dataset, root)
    before = Storage.from_folder(root).fingerprint()
    path = Storage.from_folder(root).samples[5][0]
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0xFF  # other bytes, the same size
    st = os.stat(path)
    Path(path).write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later time
    assert os.path.getsize(path) == st.st_size
    assert Storage.from_folder(root).fingerprint() != before


def test_a_copy_without_its_times_is_vouched_for_by_a_version(tmp_path, tiny_dataset):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset, copy, copy_function=shutil.copy)  # times not kept
    ours, theirs = Storage.from_folder(tiny_dataset), Storage.from_folder(copy)
    assert ours.fingerprint() != theirs.fingerprint()  # never inferred
    assert ours.fingerprint("v1") == theirs.fingerprint("v1")  # vouched for
    assert ours.fingerprint("v1") not in (ours.fingerprint(), ours.fingerprint("v2"))
    grown = copy / "class_000" / sorted(os.listdir(copy / "class_000"))[0]
    with open(grown, "ab") as f:
        f.write(b"\0")
    assert Storage.from_folder(copy).fingerprint("v1") != ours.fingerprint("v1")  # sizes count
