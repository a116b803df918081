"""A transform's head is named in cache keys by what it does: the same name in every process
for the same steps (so jobs share augmented copies), another name for other parameters or other
code (so no job is served copies another transform made)."""

import argparse
import dataclasses
import functools
import hashlib
import importlib
import io
import logging
import operator
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import PIL
import PIL.features
import pytest
import torch
from helpers import warm
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

from seneca.pipeline import codec
from seneca.pipeline.fingerprint import at_a_glance, describe, fingerprint, libraries, runtime
from seneca.pipeline.transforms import split_transform

AUG = textwrap.dedent(
    """
    class Jitter:  # no __repr__: the default one shows where the object sits in memory
        def __init__(self, strength):
            self.strength = strength

        def __call__(self, x):
            return x {op}
    """
)
PRINT = "import sys; sys.path[:0] = [{path!r}]; import {module} as m; " + (
    "from seneca.pipeline.fingerprint import fingerprint; print(fingerprint([m.Jitter(0.5)]))"
)


def _module(tmp_path, monkeypatch, op: str):
    (tmp_path / "seneca_fp_aug.py").write_text(AUG.format(op=op))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("seneca_fp_aug", None)
    return importlib.import_module("seneca_fp_aug")


def _in_another_process(tmp_path) -> str:
    code = PRINT.format(path=str(tmp_path), module="seneca_fp_aug")
    out = warm.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_users_step_has_one_name_in_every_process_and_another_for_other_code(
    tmp_path, monkeypatch
):
    aug = _module(tmp_path, monkeypatch, "")
    here = fingerprint([aug.Jitter(0.5)])
    assert "0x" not in describe(aug.Jitter(0.5))
    assert here == fingerprint([aug.Jitter(0.5)]) != fingerprint([aug.Jitter(0.7)])
    assert _in_another_process(tmp_path) == here  # jobs with this head share its copies
    _module(tmp_path, monkeypatch, "* 2")  # the same class and parameters, another __call__
    assert _in_another_process(tmp_path) != here


def test_code_edited_or_replaced_after_import_is_named_by_the_code_that_runs(tmp_path, monkeypatch):
    """A script's augmentation file edited while a job runs, the job naming its step (old
    code) after the edit, say for a validation loader made late: the job that imports the
    edited file makes other values and gets another name, never the running job's. A method
    replaced at run time names the class otherwise too."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    old = _module(tmp_path, monkeypatch, "* self.strength")
    edited = tmp_path / "seneca_fp_aug.py"
    edited.write_text(AUG.format(op="+ self.strength"))  # the same size: only the time differs
    later = time.time() + 5
    os.utime(edited, (later, later))
    running = fingerprint([old.Jitter(0.5)])
    assert old.Jitter(0.5)(2) == 1.0  # the old code runs
    sys.modules.pop("seneca_fp_aug")
    new = importlib.import_module("seneca_fp_aug")  # a new job's
    assert new.Jitter(0.5)(2) == 2.5
    assert fingerprint([new.Jitter(0.5)]) != running
    before = fingerprint([new.Jitter(0.5)])
    monkeypatch.setattr(new.Jitter, "__call__", lambda self, x: x - self.strength)
    assert fingerprint([new.Jitter(0.5)]) != before


def test_torchvisions_steps_are_named_by_their_repr_and_attributes():
    steps = [
        v2.RandomResizedCrop(224),
        v2.RandomApply([v2.ColorJitter(0.4)], p=0.8),
        v2.RandAugment(),
        T.RandomChoice([T.RandomHorizontalFlip(), T.RandomRotation(10)]),
        T.AugMix(),
    ]
    for step in steps:
        assert describe(step).startswith(repr(step)) and "0x" not in describe(step)
    # with the libraries that run them
    named = hashlib.sha1("|".join([runtime(), *map(describe, steps)]).encode()).hexdigest()[:10]
    assert fingerprint(steps) == named
    assert split_transform(v2.Compose([*steps, v2.PILToTensor()])).fingerprint == named


@pytest.mark.parametrize(
    "make",
    [
        lambda k: v2.ToDtype([torch.float32, torch.float16][k]),
        lambda k: T.ConvertImageDtype([torch.float32, torch.float16][k]),
        lambda k: v2.LinearTransformation((k + 1) * torch.eye(3), torch.zeros(3)),
        lambda k: torch.nn.Sequential(v2.ToDtype([torch.float32, torch.float16][k])),
    ],
)
def test_what_a_torchvision_steps_repr_leaves_out_names_it_too(make):
    assert repr(make(0)) == repr(make(1))  # v2 shows no dtype and no tensor
    assert fingerprint([make(0)]) == fingerprint([make(0)]) != fingerprint([make(1)])


def test_an_image_a_step_holds_is_named_by_its_pixels():
    def step(k, mode="L"):
        stamp = Image.new(mode, (2, 2), 0 if mode == "P" else k)  # P: the palette differs
        if mode == "P":
            stamp.putpalette([k, 0, 0] * 256)
        return v2.Lambda(functools.partial(Image.blend, stamp, alpha=0.5))

    assert fingerprint([step(0)]) == fingerprint([step(0)]) != fingerprint([step(1)])
    assert fingerprint([step(0, "P")]) != fingerprint([step(1, "P")])  # another palette


def test_a_glance_tells_a_step_set_or_changed_in_place_without_hashing_arrays():
    """What the loader looks at before each batch without workers: the same for a transform
    left alone; another where a step was set, added or given another parameter in place; and
    the tensors a step holds by the object they are (not their contents, whose hashing a
    model's weights would make too slow for every batch)."""
    t = v2.Compose([v2.Resize(16), v2.PILToTensor(), v2.Normalize([0.5] * 3, [0.2] * 3)])
    seen = at_a_glance(t)
    assert at_a_glance(t) == seen
    t.transforms[0].size = [24]
    assert at_a_glance(t) != seen
    seen = at_a_glance(t)
    t.transforms[-1].mean = [0.4] * 3
    assert at_a_glance(t) != seen
    seen = at_a_glance(t)
    t.transforms.append(v2.ToDtype(torch.float16))
    assert at_a_glance(t) != seen
    weights = torch.zeros(3, 3)
    head = v2.LinearTransformation(weights, torch.zeros(3))
    glance = at_a_glance(head)
    head.transformation_matrix = torch.ones(3, 3)  # another tensor
    assert at_a_glance(head) != glance
    assert describe(head) != at_a_glance(head)  # describe hashes the contents


class Slotted:
    __slots__ = ("__private", "k")

    def __init__(self, k, private=0):
        self.k = k
        self.__private = private

    def __call__(self, x):
        return x * self.k + self.__private


@dataclasses.dataclass(slots=True)
class SlottedData:
    k: float

    def __repr__(self):  # shows nothing of what it does
        return "SlottedData()"

    def __call__(self, x):
        return x * self.k


SETTINGS = Slotted(2)


def scaled(x):
    return x * SETTINGS.k


def test_a_class_with_slots_is_named_by_their_values(monkeypatch):
    for make in (Slotted, SlottedData, lambda k: Slotted(1, private=k)):
        assert fingerprint([make(2)]) == fingerprint([make(2)]) != fingerprint([make(3)])
    before = fingerprint([scaled])  # a global object with slots, read by a function
    monkeypatch.setattr(SETTINGS, "k", 3)
    assert fingerprint([scaled]) != before
    path = Path("/data/masks")  # a library's slots (lazy caches) do not name it
    named = describe(path)
    str(path), hash(path)
    assert describe(path) == named


def test_the_libraries_that_make_values_are_named(monkeypatch):
    """A Pillow-SIMD build resizes otherwise than Pillow of the same steps: a job with the one
    never reads what a job with the other cached. A build's local label (CUDA or CPU wheels of
    one torch) computes the same on a CPU and names nothing. Nor does a job of a Seneca that
    lays values out otherwise read them, or a job with another default dtype."""
    head = [v2.Resize(8)]
    before = runtime(), fingerprint(head)
    try:
        monkeypatch.setattr(torch, "__version__", torch.__version__.split("+")[0] + "+other")
        libraries.cache_clear()
        assert (runtime(), fingerprint(head)) == before
        monkeypatch.setattr(PIL, "__version__", PIL.__version__ + ".post9")
        libraries.cache_clear()
        assert runtime() != before[0] and fingerprint(head) != before[1]
        monkeypatch.delitem(PIL.features.modules, "avif", raising=False)  # an older Pillow's
        libraries.cache_clear()
        assert len(runtime()) == 6
        monkeypatch.undo()
        monkeypatch.setattr(codec, "FORMAT_VERSION", codec.FORMAT_VERSION + 1)  # another layout
        libraries.cache_clear()
        assert runtime() != before[0] and fingerprint(head) != before[1]
        monkeypatch.undo()
        libraries.cache_clear()
        torch.set_default_dtype(torch.float64)  # ToTensor's output then float64
        try:
            assert runtime() != before[0] and fingerprint(head) != before[1]
        finally:
            torch.set_default_dtype(torch.float32)
    finally:
        monkeypatch.undo()
        libraries.cache_clear()
    assert (runtime(), fingerprint(head)) == before


def _named_in_a_new_interpreter(expression, **env):
    """What ``expression`` (of ``seneca.pipeline.fingerprint``'s names) prints in a fresh
    interpreter with ``env`` set."""
    code = f"from seneca.pipeline.fingerprint import *; print({expression})"
    return warm.fresh(code, **env).strip()


def test_the_cpu_instructions_torchs_kernels_use_are_named():
    """torch resizes a uint8 image otherwise with its AVX2 kernels than with its generic ones
    (torch 2.14), so a job on a machine without them (or told not to use them) never reads
    what one with them cached."""
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this machine's torch uses its generic kernels only")
    assert _named_in_a_new_interpreter("runtime()") == runtime()
    assert _named_in_a_new_interpreter("runtime()", ATEN_CPU_CAPABILITY="default") != runtime()


class _Opener:  # a format registered with Pillow by a plugin (its accept never matches)
    pass


def test_image_formats_registered_by_plugins_are_named(monkeypatch):
    """A plugin's format (``pillow_heif``'s HEIF) decodes files that raise without it, so it
    names the values; Pillow's own formats, which it registers when it first needs them, do
    not."""
    from PIL import Image

    before = runtime()
    Image.init()  # Pillow's formats all registered (for good: their modules register at import)
    assert runtime() == before
    # the plugin's format registered in copies of the registry, put back after the test
    monkeypatch.setattr(Image, "ID", list(Image.ID))
    monkeypatch.setattr(Image, "OPEN", dict(Image.OPEN))
    Image.register_open("TESTFORMAT", _Opener, lambda prefix: False)
    assert runtime() != before


def _flip(x):
    return x.flip(-1)


def _scaled(k):
    return lambda x: x * k


def test_functions_are_named_by_their_code_and_what_they_are_given():
    same = [v2.Lambda(lambda x: x), v2.Lambda(lambda x: x)]  # two lambdas, one line of code
    assert fingerprint(same[:1]) == fingerprint(same[1:])
    assert fingerprint([v2.Lambda(lambda x: x)]) != fingerprint([v2.Lambda(lambda x: -x)])
    assert fingerprint([T.Lambda(_flip)]) != fingerprint([T.Lambda(_scaled(2))])
    assert fingerprint([T.Lambda(_scaled(2))]) != fingerprint([T.Lambda(_scaled(3))])
    partial = functools.partial(torch.clamp, min=0.0)
    assert fingerprint([partial]) != fingerprint([functools.partial(torch.clamp, min=0.1)])
    # a torchvision step holding a user's one: named by what it holds, not its repr
    assert fingerprint([T.RandomApply([_scaled(2)])]) != fingerprint([T.RandomApply([_scaled(3)])])


class _Table:
    def __init__(self, table, parent=None):
        self.table, self.parent = table, parent

    def __call__(self, x):
        return x


def test_arrays_by_content_and_no_walk_without_end():
    a, b = np.arange(6), np.arange(6)
    assert fingerprint([_Table(a)]) == fingerprint([_Table(b)])
    assert fingerprint([_Table(a)]) != fingerprint([_Table(a + 1)])
    assert fingerprint([_Table(torch.ones(3))]) != fingerprint([_Table(torch.zeros(3))])
    assert fingerprint([_Table(torch.ones(3, dtype=torch.bfloat16))])
    looped = _Table(a)
    looped.parent = looped
    assert "<cycle>" in describe(looped)
    samples = [(f"img{i}.jpg", i % 10) for i in range(100_000)]  # a whole dataset's, say
    assert "100000" in describe(_Table(samples)) and len(describe(_Table(samples))) < 4_000
    table = list(range(256))  # a lookup table: every value counts
    changed = [*table[:200], 0, *table[201:]]
    assert fingerprint([_Table(table)]) != fingerprint([_Table(changed)])
    assert fingerprint([_Table(set(table))]) == fingerprint([_Table(set(reversed(table)))])


def test_a_long_collection_is_named_by_every_item():
    """A palette of tuples, a dict of them, a set, a list of arrays: two that differ only after
    their 64th item make other values, and are named otherwise; the same items, alike."""
    palette = [(level, level, level) for level in range(256)]
    other = [*palette[:200], (1, 2, 3), *palette[201:]]
    arrays = [np.full(3, level) for level in range(100)]
    pairs = [
        (palette, other),
        (dict(enumerate(palette)), dict(enumerate(other))),
        (set(palette), set(other)),
        (arrays, [*arrays[:90], np.zeros(3), *arrays[91:]]),
    ]
    for one, another in pairs:
        assert fingerprint([_Table(one)]) != fingerprint([_Table(another)])
        assert fingerprint([_Table(one)]) == fingerprint([_Table(type(one)(one))])
    # a glance before each batch does not hash what is not plain data
    assert at_a_glance([_Table(palette)]) == at_a_glance([_Table(other)])


class _Nested:
    def __init__(self, depth, k):
        self.inner = _Nested(depth - 1, k) if depth else k

    def __call__(self, x):
        return x


def test_what_is_too_deep_or_too_long_to_name_whole_shares_nothing():
    """A step nested in Composes, or holding a config of dicts and lists, is named 16 levels
    deep (an object, and the dict of its attributes, a level each); deeper, or holding more
    than 4,096 items that are not plain data, it cannot be named whole, and gets a name of its
    own each time, never one another step shares."""
    composed = [v2.Compose([v2.Compose([v2.Compose([_Shown(k)])])]) for k in (1, 2)]
    assert fingerprint(composed[:1]) != fingerprint(composed[1:])
    assert fingerprint(composed[:1]) == fingerprint(composed[:1])
    assert fingerprint([_Nested(7, 1)]) == fingerprint([_Nested(7, 1)])
    assert fingerprint([_Nested(7, 1)]) != fingerprint([_Nested(7, 2)])
    deep = _Nested(8, 1)  # 18 levels: each object and its attributes one
    assert fingerprint([deep]) != fingerprint([deep])
    many = _Table([np.full(2, i % 7) for i in range(5000)])
    assert fingerprint([many]) != fingerprint([many])
    assert at_a_glance([deep]) == at_a_glance([deep]) and at_a_glance([many])


class _Shown:
    """A user's step with a repr that does not show its parameter."""

    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x

    def __repr__(self):
        return "Shown()"


def test_a_users_step_inside_torchvisions_is_named_by_what_it_holds():
    assert fingerprint([T.RandomApply([_Shown(1)])]) != fingerprint([T.RandomApply([_Shown(2)])])
    assert fingerprint([v2.RandomChoice([_Shown(1)])]) != fingerprint(
        [v2.RandomChoice([_Shown(2)])]
    )


class _Unprintable:
    def __repr__(self):
        raise RuntimeError("no repr")

    def __call__(self, x):
        return x

    __slots__ = ()


def test_a_step_that_cannot_be_described_shares_nothing():
    step = _Unprintable()
    assert fingerprint([step]) != fingerprint([step])  # a name of its own each time


SIZE = 32
ARGS = argparse.Namespace(size=32, lr=0.1)
CONFIG = {"size": 32, "lr": 0.1}
DATASET = "small"
SIZES = {"small": 32, "large": 64}
_MEMO: dict[str, np.ndarray] = {}


def _sized(x):
    return x[:SIZE]


def _by_helper(x):
    return _sized(x)


def _by_args(x):
    return x[: ARGS.size]


def _by_config(x):
    return x[: CONFIG["size"]]


def _by_table(x):
    return x[: SIZES[DATASET]]


def _memoized(x):
    _MEMO[str(len(_MEMO))] = np.zeros(len(x))  # arrays by a key of no constant: not a setting
    return x


class _Crop:
    def __call__(self, x):
        return x[:SIZE]


def _with_helper_class(x):
    return _Crop()(x)


def _names(*steps):
    return [fingerprint([step]) for step in steps]


def test_the_user_s_functions_are_named_by_the_settings_they_read(monkeypatch):
    """A sweep that sets a module global (SIZE = int(sys.argv[1])) read by a function of its
    head, directly, through a helper function or class, an object's attribute or a table of
    settings, makes other values: another name. What the code does not read (another attribute
    of the object, a memo of arrays) keeps the name."""
    steps = (_sized, _by_helper, _by_args, _by_config, _Crop(), _with_helper_class)
    before = _names(*steps)
    assert before == _names(*steps)
    monkeypatch.setattr(sys.modules[__name__], "SIZE", 16)
    changed = _names(*steps)
    assert [a != b for a, b in zip(before, changed, strict=True)] == [1, 1, 0, 0, 1, 1]
    monkeypatch.setattr(ARGS, "size", 16)
    monkeypatch.setitem(CONFIG, "size", 16)
    by_args, by_config = _names(_by_args, _by_config)
    assert by_args != changed[2] and by_config != changed[3]  # each reads its size again
    # the settings they do not read: the same names
    now = _names(*steps)
    monkeypatch.setattr(ARGS, "lr", 0.5)
    assert _names(*steps) == now
    # a table of plain settings is named whole, however the code reads it
    table = fingerprint([_by_table])
    monkeypatch.setitem(SIZES, "small", 16)
    assert fingerprint([_by_table]) != table
    monkeypatch.setitem(CONFIG, "lr", 0.5)
    assert fingerprint([_by_config]) != now[3]
    memo = fingerprint([_memoized])
    _memoized([1, 2])
    assert fingerprint([_memoized]) == memo
    # a library's function is named by its source, not by the globals it reads
    assert "globals[" not in describe(np.asarray) + describe(textwrap.dedent)


class _Settings:
    """A script's settings object, read through its class's code."""

    LEVELS = (0, 64, 128)  # a class attribute a sweep may set

    def __init__(self, size):
        self._size = size

    @property
    def size(self):
        return self._size

    @size.setter
    def size(self, size):  # what a sweep sets
        self._size = size

    def crop(self):
        return self._size

    def __getattr__(self, name):
        if name == "height":
            return self._size
        raise AttributeError(name)


SCRIPT = _Settings(32)
_LOG = logging.getLogger("seneca.tests.fingerprint")


def _by_property(x):
    return x[: SCRIPT.size]


def _by_method(x):
    return x[: SCRIPT.crop()]


def _by_getattr(x):
    return x[: SCRIPT.height]


def _by_name(x):
    return x[: getattr(SCRIPT, "size")]  # noqa: B009 (a name given as a string)


def _by_class_setting(x):
    return x[: SCRIPT.LEVELS[-1]]


def _logged(x):
    _LOG.debug("cropping %s", x)
    return x


def test_settings_read_through_a_class_s_code_name_the_function(monkeypatch):
    """A setting read through a property, a method, ``__getattr__``, ``getattr`` with its
    name, or a class attribute set at run time: a sweep that changes it makes other values, and
    another name. A library's object the code only calls (a logger) is named by what the code
    reads of it, as before: its state changing as it is used keeps the name."""
    steps = (_by_property, _by_method, _by_getattr, _by_name)
    before = _names(*steps)
    assert before == _names(*steps)
    monkeypatch.setattr(SCRIPT, "size", 16)
    assert all(a != b for a, b in zip(before, _names(*steps), strict=True))
    levels = fingerprint([_by_class_setting])
    monkeypatch.setattr(_Settings, "LEVELS", (0, 64, 255))
    assert fingerprint([_by_class_setting]) != levels
    logged = fingerprint([_logged])
    _LOG.setLevel(logging.INFO)
    _LOG.isEnabledFor(logging.DEBUG)  # fills the logger's cache
    assert fingerprint([_logged]) == logged


class _ClassSized:
    SIZE = 32  # a setting of the class, which a script may set: _ClassSized.SIZE = 64
    _MEMO: ClassVar[dict] = {}  # a memo of the class's, filled as it runs

    def __call__(self, x):
        self._MEMO[len(self._MEMO)] = np.asarray(x)
        return x[: self.SIZE]


class _SubclassSized(_ClassSized):
    pass


def test_a_class_setting_set_at_run_time_names_its_steps(monkeypatch):
    """A class attribute the methods read, set by the script at run time (its source still
    says the old value): the step, a step of a subclass and the class itself are named
    otherwise. The class's memo filling as it runs keeps the name."""
    made = [_ClassSized(), _SubclassSized(), _ClassSized, v2.Lambda(_ClassSized())]
    before = _names(*made)
    for step in made[:2]:
        step([1, 2])
    assert _names(*made) == before
    monkeypatch.setattr(_ClassSized, "SIZE", 64)
    assert all(a != b for a, b in zip(before, _names(*made), strict=True))


def test_a_built_in_method_is_named_by_the_object_it_is_bound_to():
    """``v2.Lambda(mask.mul)``: the mask's values make the images, and name the step; so do a
    dict's for its ``get`` and a string's for its ``format``. A module's function is named as
    before."""
    pairs = [
        (torch.ones(3).mul, torch.zeros(3).mul),
        (np.ones(3).__mul__, np.zeros(3).__mul__),
        ({"a": 1}.get, {"a": 2}.get),
        ("{}x".format, "{}y".format),
    ]
    for one, another in pairs:
        assert fingerprint([v2.Lambda(one)]) != fingerprint([v2.Lambda(another)])
    assert fingerprint([v2.Lambda(torch.ones(3).mul)]) == fingerprint(
        [v2.Lambda(torch.ones(3).mul)]
    )
    assert describe(len) == "builtins.len"


class _Records:
    """A dataset of the user's: many records, and a decode that reads a setting through a
    helper method."""

    def __init__(self, mode, records):
        self.mode, self.records, self.which = mode, records, "mode"

    def _converted(self, image):
        return image.convert(self.mode)

    def seneca_decode(self, data, index):
        return self._converted(Image.open(io.BytesIO(data)))

    @functools.cached_property
    def depth(self):
        return len(self.mode)

    def deep(self, x):
        return x * self.depth

    def by_name(self, x):
        return x * len(getattr(self, self.which))  # an attribute by a name it computes

    def by_helper(self, x):
        return self.by_name(x)


def test_a_method_is_named_by_what_it_reads_of_its_object():
    """A bound method (a dataset's ``seneca_decode``) is named by the attributes its code
    reads of its object, through the methods and properties it calls: a setting they read
    names it; the dataset's 10,000 records of files, which it does not read, neither name it
    nor leave it unnamed."""
    records = [Path(f"/data/{i}.jpg") for i in range(10_000)]
    rgb = fingerprint([_Records("RGB", records).seneca_decode])
    assert fingerprint([_Records("RGB", records).seneca_decode]) == rgb
    assert fingerprint([_Records("RGB", records[:5]).seneca_decode]) == rgb
    assert fingerprint([_Records("L", records).seneca_decode]) != rgb
    assert fingerprint([_Records("RGB", []).deep]) != fingerprint([_Records("L", []).deep])
    for method in ("by_name", "by_helper"):
        named = [fingerprint([getattr(_Records(mode, []), method)]) for mode in ("RGB", "L")]
        assert named[0] != named[1]


#: a config loaded from a file (nested deeper than a table), read by a key the code computes
NESTED = {"train": {"aug": {"crop": {"size": 32}}}, "val": {"aug": {"crop": {"size": 32}}}}
STAGE = "train"


def _by_nested_config(x):
    return x[: NESTED[STAGE]["aug"]["crop"]["size"]]


def test_a_nested_config_read_by_a_computed_key_names_the_function(monkeypatch):
    """A dict that is not a memo of arrays or images (a config of dicts, a registry of steps)
    is named whole, however the code reads it: a sweep that changes what the code reads by a
    key it computes makes other values."""
    before = fingerprint([_by_nested_config])
    monkeypatch.setitem(NESTED["train"]["aug"]["crop"], "size", 64)
    assert fingerprint([_by_nested_config]) != before


def _by_environment(x):
    return x[: int(os.environ.get("SENECA_TEST_CROP", "32"))]


def _by_getenv(x):
    return x[: int(os.getenv("SENECA_TEST_CROP", "32"))]


def test_an_environment_variable_the_code_names_names_the_function(monkeypatch):
    """A setting given as an environment variable (a launcher sets it per run), read by the
    name the code gives: another value makes other values, and another name; another
    variable keeps the name."""
    monkeypatch.delenv("SENECA_TEST_CROP", raising=False)
    before = _names(_by_environment, _by_getenv)
    monkeypatch.setenv("SENECA_TEST_OTHER", "1")
    assert _names(_by_environment, _by_getenv) == before
    monkeypatch.setenv("SENECA_TEST_CROP", "64")
    assert all(a != b for a, b in zip(before, _names(_by_environment, _by_getenv), strict=True))


def test_a_librarys_steps_are_named_by_its_release(monkeypatch):
    """A library's step calls code of the library that its source does not show (a helper, a
    kernel), which another release may change: a job with another release of it (timm,
    albumentations, numpy) never reads what a job with this one cached. A build's local label
    names nothing."""
    steps = [v2.Lambda(np.fliplr), np.flipud]
    before = fingerprint(steps)
    monkeypatch.setattr(np, "__version__", np.__version__ + "+local")
    assert fingerprint(steps) == before
    monkeypatch.setattr(np, "__version__", np.__version__.split("+")[0] + ".post1")
    assert fingerprint(steps) != before
    monkeypatch.undo()
    assert fingerprint(steps) == before


def _cell_class(body):
    """A transform class as a notebook cell makes it (its source cannot be read)."""
    source = (
        "class Jitter:\n    def __init__(self):\n        self.k = 2\n"
        f"    def __call__(self, x):\n        return {body}\n"
    )
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<ipython-input-3-5c1b>", "exec"), namespace)
    return namespace["Jitter"]


def test_a_notebook_cells_class_is_named_by_its_code():
    """A notebook's transform class, whose source cannot be read: the cell run again with
    other code in the class makes other values, and is named otherwise; run again unchanged,
    it is the same transform."""
    times = fingerprint([_cell_class("x * self.k")()])
    assert fingerprint([_cell_class("x * self.k")()]) == times
    assert fingerprint([_cell_class("x + self.k")()]) != times
    assert fingerprint([_cell_class("x + self.k")]) != fingerprint([_cell_class("x * self.k")])


class _Sized:
    size = property(operator.attrgetter("_size"))  # a property whose getter is built in

    def __init__(self, size):
        self._size = size

    def __call__(self, x):
        return x[..., : self.size]


def test_a_class_with_a_built_in_property_is_named():
    """A property whose getter is built in (``operator.attrgetter``) has no code to name: the
    class is still named, by its other methods, as a step and as what a step holds."""
    made = type("Made", (), {"size": property(operator.attrgetter("k")), "k": 2})
    for steps in ([_Sized(3)], [v2.Lambda(_Sized)], [made()], [made]):
        assert fingerprint(steps) == fingerprint(steps)  # not the name of what cannot be named
    assert fingerprint([_Sized(3)]) != fingerprint([_Sized(4)])


def test_code_with_a_set_in_it_is_named_alike_in_every_process():
    """A set constant's order follows its strings' hashes, which differ between processes:
    a lambda's name (its code) does not."""
    step = "lambda x: x in {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}"
    names = {
        _named_in_a_new_interpreter(f"fingerprint([{step}])", PYTHONHASHSEED=str(seed))
        for seed in (1, 2, 3, 4)
    }
    assert len(names) == 1


def test_the_scripts_own_steps_are_named_alike_where_it_runs_as_mp_main():
    """multiprocessing's spawned workers run the script as ``__mp_main__``, and its classes and
    functions say so there: they name what the script's ``__main__`` names."""

    def step(module):
        return type("Halve", (), {"__module__": module, "__call__": lambda self, x: x // 2})()

    assert fingerprint([step("__mp_main__")]) == fingerprint([step("__main__")])
    assert fingerprint([step("__main__")]) != fingerprint([step("train")])
