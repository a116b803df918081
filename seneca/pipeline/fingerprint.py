"""What names a transform's cached head in cache keys.

Jobs share augmented copies when their heads have the same name, so the name must be the same
for the same steps in every process and on every machine, and differ whenever a step would make
other images: other parameters, or other code.

* torchvision's own steps are named by their ``repr`` and their attributes (a repr may leave
  some out: a v2 step's shows no dtype and no tensor);
* any other step (a class of the user's, a ``Lambda``, a torchvision step holding one) by its
  class, the source of that class, its bases and the compiled code of its methods (what runs,
  which the source may not show: a notebook cell's class, a file edited since it was
  imported, a method replaced at run time) and its attributes, described in turn;
* functions by their module, name, source and compiled code, default arguments and the values
  they close over; a method by its object (a built-in one: ``mask.mul``; one of the user's class
  by what it reads of its object, as a global object below); a function of the user's (not of
  the standard library or an installed package) also by the module globals its code reads (a
  setting such as ``SIZE = int(sys.argv[1])``, an environment variable it names, a helper
  function; of a global object, the attributes the code names and, of an object of the user's
  class, those its methods and properties that the code calls read in turn, or all of them where
  that cannot be told: a ``__getattr__``, a name the code computes), as are the methods of a
  user's class, also by the class attributes they read (set at run time, say): a sweep that
  changes one makes other values;
* tensors and arrays by dtype, shape and a hash of their bytes; PIL images by mode, size, a
  hash of their pixels, palette and ``info``;
* lists, dicts and sets by every item (a long one's first items, its length and a hash of
  all).

What cannot be named whole (objects nested deeper than ``_DEPTH``, a collection of more than
``_WHOLE`` items that are not plain data) is never named by a part of it: :func:`fingerprint`
gives it a name of its own each time, as a step whose ``repr`` raises.

Every name also names the libraries that make the values (:func:`runtime`): torch,
torchvision, Pillow and its codecs, whose versions may make other images of the same steps; and
a class or function of another package by that package's version too (timm's steps call timm's
code that their source does not show).

Nothing is named by where it sits in memory (the ``0x7f...`` of a default ``repr``), which would
give every process a name of its own and no job anything to share.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import hashlib
import inspect
import itertools
import logging
import os
import re
import sys
import sysconfig
import time
import types
import weakref
from typing import Any

__all__ = ["at_a_glance", "describe", "fingerprint", "libraries", "runtime"]

#: how deep attributes are followed (an object deeper than that cannot be named), how many
#: items of a long list are described in its name, and of how many items that are not plain
#: data at most a list is named whole (a longer one cannot be named)
_DEPTH = 16
_ITEMS = 64
_WHOLE = 4096
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
log = logging.getLogger("seneca")
#: the packages whose objects' ``repr`` lists what they do (torchvision's steps)
_REPR_NAMES = ("torchvision", "torch")


#: what :func:`fingerprint` names, unless told otherwise (in the log)
_HEAD = "the transform's steps before the cache boundary"


def fingerprint(steps: list[Any], about: str = _HEAD) -> str:
    """The short name of ``steps`` in cache keys, with the libraries that run them
    (:func:`runtime`): a transform's head ("none" for no head), or what decodes a dataset's
    files. Steps that cannot be named in full (a step whose ``repr`` raises, a list too long or
    nested too deep to name whole) get a name of their own each time (``about`` says what they
    are, in the log): the values they make are shared with no other job, and none is taken
    from one."""
    if not steps:
        return "none"
    try:
        text = "|".join([runtime(), *(describe(s) for s in steps)])
    except Exception as err:  # whatever a user's object raises
        log.info(
            "%s cannot be named (%r): what the cache holds for them is shared with no other "
            "job, and not read once the loader names them again (each epoch, and in each "
            "worker): it cannot tell that they did not change",
            about,
            err,
        )
        text = f"{os.getpid()}.{id(steps)}.{time.time_ns()}"
    return hashlib.sha1(text.encode()).hexdigest()[:10]


#: the Pillow modules whose libraries make or convert images (their versions name the runtime)
_PIL_MODULES = ("pil", "webp", "avif", "littlecms2")


def runtime() -> str:
    """The short name of what makes a sample's values in this process besides the user's code:
    the libraries (:func:`libraries`) and the settings that decide what they make, as they
    are now: whether a truncated file decodes, with the missing rows grey, or raises
    (``ImageFile.LOAD_TRUNCATED_IMAGES``), the most pixels an image may have before decoding
    it raises (``Image.MAX_IMAGE_PIXELS``), torch's default dtype, the dtype of
    ``ToTensor``'s output (``torch.set_default_dtype``), the CPU instructions torch's kernels
    use (``torch.backends.cpu.get_cpu_capability``: its AVX2 and its generic resize round
    otherwise), and the image formats registered with Pillow by others than Pillow
    (``Image.register_open``: a plugin such as ``pillow_heif``'s, without which such a file
    raises, or one that opens a format otherwise). Pillow's own formats, which it registers as
    it needs them, are named by its version."""
    import torch
    from PIL import Image, ImageFile

    plugins = [
        f"{name}={describe(opener)}"
        for name, (opener, _) in sorted(Image.OPEN.items())
        if not getattr(opener, "__module__", "").startswith("PIL.")
    ]
    made = (
        f"{libraries()}|{ImageFile.LOAD_TRUNCATED_IMAGES}|{Image.MAX_IMAGE_PIXELS}"
        f"|{torch.get_default_dtype()}|{torch.backends.cpu.get_cpu_capability()}"
        f"|{','.join(plugins)}"
    )
    return hashlib.sha1(made.encode()).hexdigest()[:6]


@functools.cache
def libraries() -> str:
    """The short name of the libraries that make a sample's values in this process: torch,
    torchvision, Pillow and the codec libraries it was built with, and the layout in which
    Seneca keeps a value (``codec.FORMAT_VERSION``). Other versions may make other
    values (a Pillow-SIMD build resizes otherwise than Pillow), so cache keys name them. A
    build's local label (``+cu130``, ``+cpu``) does not count: it computes the same on a CPU."""
    import PIL
    import torch
    import torchvision
    from PIL import features

    from seneca.pipeline import codec

    parts = [
        f"values {codec.FORMAT_VERSION}",  # how a cached value is laid out (seneca's codec)
        f"torch {torch.__version__.split('+')[0]}",
        f"torchvision {torchvision.__version__.split('+')[0]}",
        f"Pillow {PIL.__version__}",
    ]
    parts += [f"{c} {features.version_codec(c)}" for c in sorted(features.codecs)]
    # (an older Pillow knows fewer modules, and asking for another raises)
    parts += [f"{m} {features.version_module(m)}" for m in _PIL_MODULES if m in features.modules]
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:6]


def describe(obj: Any) -> str:
    """``obj`` as text that names what it does (module docs)."""
    return _describe(obj, 0, frozenset())


#: set while :func:`at_a_glance` describes: tensors, arrays and images by what they are, not
#: by their contents
_GLANCING = contextvars.ContextVar("glancing", default=False)


def at_a_glance(obj: Any) -> str:
    """``obj`` described as :func:`describe` describes it, but each tensor, array and image by
    the object it is, its shape and type, not by a hash of its contents: cheap enough to tell
    before every batch whether a step was set, added or given other parameters in place (a
    model's weights would cost their hashing), not whether an array's values were written in
    place. A constant text where ``obj`` cannot be described."""
    token = _GLANCING.set(True)
    try:
        return describe(obj)
    except Exception:  # whatever a user's object raises: described again at its next naming
        return "<not described>"
    finally:
        _GLANCING.reset(token)


def _describe(obj: Any, depth: int, path: frozenset[int]) -> str:
    if isinstance(obj, _PLAIN):
        return repr(obj)
    if isinstance(obj, enum.Enum):
        return f"{_name(type(obj))}.{obj.name}"
    if depth > _DEPTH:
        if _GLANCING.get():
            return _name(type(obj))
        raise _Unnamed(f"a {_name(type(obj))} nested deeper than {_DEPTH} attributes")
    if id(obj) in path:
        return "<cycle>"
    path = path | {id(obj)}
    more = functools.partial(_describe, depth=depth + 1, path=path)
    if isinstance(obj, list | tuple | dict | set | frozenset):
        return _collection(obj, more)
    if isinstance(obj, type):
        return _class(obj, more)
    if isinstance(obj, functools.partial):
        return f"partial({more(obj.func)}, {more(obj.args)}, {more(obj.keywords)})"
    if isinstance(obj, types.MethodType):
        owner, func = obj.__self__, obj.__func__
        if _users_class(type(owner)) and isinstance(func, types.FunctionType):
            # an object of the user's (a dataset's ``seneca_decode``): what the method reads
            return f"{_as_read(owner, *_looked_up(func.__code__), more)}.{more(func)}"
        return f"{more(owner)}.{more(func)}"
    if isinstance(obj, types.FunctionType):
        return _function(obj, more)
    if isinstance(obj, types.BuiltinFunctionType | types.MethodWrapperType):
        owner = getattr(obj, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            return f"{more(owner)}.{obj.__name__}"  # a method of an object: ``mask.mul``
    if isinstance(obj, types.BuiltinFunctionType | types.ModuleType):
        return f"{_module(getattr(obj, '__module__', None))}.{_module(obj.__name__)}"
    if _is_array(obj):
        return _array(obj)
    if _is_image(obj):
        return _image(obj, more)
    if _shown_by_repr(obj, 0):
        # with its attributes, which the repr may leave out (a v2 step's shows no dtype, no
        # tensor, no None): ``ToDtype(torch.float16)`` is ``ToDtype(scale=False)`` to it
        shown = _attributes(obj)
        return f"{obj!r}{more(shown)}" if shown else repr(obj)
    state = _state(obj)
    if state is None:  # no attributes to describe (a C type): its type and what repr shows
        return f"{_name(type(obj))}({_ADDRESS.sub('', repr(obj))})"
    cls = type(obj)
    methods = _methods(cls)
    read = _globals_read(methods, more, cls)
    return f"{_name(cls)}#{_code_of(cls, methods)}{more(dict(state))}{read}"


def _collection(obj: Any, more: Any) -> str:
    """A list, tuple, dict or set: its items in turn. Of a long one, the first ``_ITEMS``, how
    many it holds and a hash of them all (:func:`_whole`): the whole description of a long list
    (a dataset's samples) would be too long to keep."""
    kind = type(obj).__name__
    whole = _whole(obj, more) if len(obj) > _ITEMS else ""
    if len(obj) > _ITEMS and isinstance(obj, set | frozenset):
        return f"{kind}({len(obj)} items{whole})"  # no order to pick the first ones by
    if isinstance(obj, dict):
        parts = [f"{more(k)}: {more(v)}" for k, v in itertools.islice(obj.items(), _ITEMS)]
    else:
        parts = [more(x) for x in itertools.islice(obj, _ITEMS)]
    if isinstance(obj, set | frozenset):
        parts.sort()  # a set's order differs between processes
    return f"{kind}[{', '.join(parts)}]({len(obj)}{whole})"


def _whole(obj: Any, more: Any) -> str:
    """A hash of every item of the long collection ``obj`` (a dict's keys and values), in order
    (a set's sorted): items that are plain data (a lookup table, a palette of tuples, a
    dataset's samples) by their ``repr``, others as described, so that two lists that differ
    in any item are named otherwise. At a glance, only a list of plain values is hashed (the
    look before each batch tells a list set or grown, not its items replaced in place).
    Raises :class:`_Unnamed` for more than ``_WHOLE`` items that are not plain data."""
    items = list(itertools.chain.from_iterable(obj.items()) if isinstance(obj, dict) else obj)
    glancing = _GLANCING.get()
    if glancing and not all(isinstance(x, _PLAIN) for x in items):
        return ""
    if glancing or all(map(_row, items)):  # (the common case, quickly: a dataset's samples)
        texts = list(map(repr, items))
    else:
        texts = [repr(x) if _table(x, 1) else None for x in items]
    others = [i for i, text in enumerate(texts) if text is None]
    if len(others) > _WHOLE:
        raise _Unnamed(f"a {type(obj).__name__} of {len(others)} items that are not plain data")
    for i in others:
        texts[i] = more(items[i])
    if isinstance(obj, set | frozenset):
        texts.sort()
    return " " + hashlib.sha1("\0".join(texts).encode()).hexdigest()[:10]


def _row(x: Any) -> bool:
    """Whether ``x`` is a plain value or a tuple of them."""
    return isinstance(x, _PLAIN) or (type(x) is tuple and all(isinstance(y, _PLAIN) for y in x))


class _Unnamed(ValueError):
    """What cannot be named in full (too deep, too long): named as a step that cannot be
    described, never by a part of it."""


def _name(cls: type) -> str:
    return f"{_module(cls.__module__)}.{cls.__qualname__}"


def _module(name: str | None) -> str:
    """A module's name as every process of a job knows it (the script a job runs is
    ``__main__``, and ``__mp_main__`` in the workers multiprocessing spawns or starts from a
    fork server, where its classes and functions say so), with the version of the package it
    is of: an installed library's code calls code of its own that its source does not show,
    which another release may change."""
    if name == "__mp_main__":
        name = "__main__"
    return f"{name}{_release(name)}" if name else ""


def _release(module: str) -> str:
    """``@version`` of the package ``module`` is of, as it says (``__version__``, less a
    build's local label such as ``+cu130``); "" when it says none (a script, the standard
    library)."""
    package = sys.modules.get(module.split(".")[0])
    version = getattr(package, "__version__", None)
    return f"@{version.split('+')[0]}" if isinstance(version, str) else ""


#: the hash of each class's or function's source, read once per object (a class's source is
#: found by parsing its whole module, tens of milliseconds, and a transform is named again
#: before each epoch); the code that runs is named apart (:func:`_code_of`)
_SOURCES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _source(obj: Any) -> str:
    """A hash of ``obj``'s source, as its file reads now; "" where it cannot be read (a
    notebook cell's class, a class made at run time)."""
    try:
        return _SOURCES[obj]
    except (KeyError, TypeError):  # not read yet, or an object no weak reference can name
        pass
    try:
        text = inspect.getsource(obj)
    except Exception:  # no file (a notebook's class, a class made at run time), or unreadable
        text = None
    named = "" if text is None else hashlib.sha1(text.encode()).hexdigest()[:10]
    with contextlib.suppress(TypeError):
        _SOURCES[obj] = named
    return named


#: the hash of each code object's compiled code (:func:`_code`), made once per code object
_COMPILED: weakref.WeakKeyDictionary[types.CodeType, str] = weakref.WeakKeyDictionary()


def _compiled(code: types.CodeType) -> str:
    try:
        return _COMPILED[code]
    except KeyError:
        named = _COMPILED[code] = hashlib.sha1(_code(code).encode()).hexdigest()[:10]
        return named


def _code_of(obj: Any, methods: list[Any] | None = None) -> str:
    """What names the code of ``obj``, a function or a class: its source (:func:`_source`) and
    the code that runs, which the source may not be (its file edited since it was imported, a
    method replaced at run time): a function's compiled code; a class's bases and the compiled
    code of its methods of the user's code (``methods``: :func:`_methods` of it, where known)."""
    if isinstance(obj, type):
        bases = ",".join(_name(k) for k in obj.__mro__)
        if not _users_class(obj):  # a library's: named by its release
            methods = []
        elif methods is None:
            methods = _methods(obj)
        mine = [f for f in methods if _users(f.__code__.co_filename)]
        ran = bases + "".join(f"{f.__qualname__}{_compiled(f.__code__)}" for f in mine)
        return _source(obj) + hashlib.sha1(ran.encode()).hexdigest()[:10]
    return _source(obj) + _compiled(obj.__code__)


def _function(f: types.FunctionType, more: Any) -> str:
    code = _code_of(f)
    cells = []
    for cell in f.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            cells.append(None)
    given = more((f.__defaults__, f.__kwdefaults__, cells))
    return f"{_module(f.__module__)}.{f.__qualname__}#{code}{given}{_globals_read([f], more)}"


#: where the standard library and installed packages live: their functions are named by their
#: source alone, not by the globals they read (a library's own settings and caches)
_LIBRARY = tuple(
    sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
)


def _users(filename: str | None) -> bool:
    """Whether code from ``filename`` is the user's (not the standard library's or an installed
    package's, nor built in)."""
    return bool(filename) and not filename.startswith((*_LIBRARY, "<frozen"))


#: the names of what reads an environment variable (``os.environ["SIZE"]``, ``os.getenv``)
_ENVIRON = frozenset({"environ", "getenv"})


def _globals_read(functions: list[Any], more: Any, cls: type | None = None) -> str:
    """What the user's ``functions`` read of their module's globals, described: each global
    their code (and the code inside it) names; of a global object or a module of the user's,
    only the attributes the code names (:func:`_as_read`); of a global dict of arrays or images
    (a memo), only the entries the code names by a constant key. The methods of ``cls`` also by
    the attributes of the user's classes (``cls`` and its bases) they name that are not code
    (``SIZE = 32`` in the class, which a script may set: ``Crop.SIZE = 64``), read alike; and
    code that reads the environment by the variables it names as constants. "" when they read
    none."""
    names: set[str] = set()
    keys: set[Any] = set()
    found: dict[str, Any] = {}
    for f in functions:
        code, namespace = getattr(f, "__code__", None), getattr(f, "__globals__", None)
        if code is None or namespace is None or not _users(code.co_filename):
            continue
        named, constants = _looked_up(code)
        names |= named
        keys |= constants
        found.update((n, namespace[n]) for n in named if n in namespace)
    for klass in reversed(cls.__mro__ if cls is not None and names else ()):  # (its own last)
        if klass is not object and _users_class(klass):
            found.update(
                (f"{cls.__qualname__}.{n}", value)
                for n, value in vars(klass).items()
                if n in names and not n.startswith("__") and _is_data(value)
            )
    read = [f"{n}={_as_read(found[n], names, keys, more)}" for n in sorted(found)]
    if names & _ENVIRON:  # the environment, by the names the code gives as constants
        named = sorted(k for k in keys if isinstance(k, str) and k in os.environ)
        env = {k: os.environ[k] for k in named}
        read.append(f"environ={more(env)}")
    return f"globals[{', '.join(read)}]" if read else ""


def _looked_up(code: types.CodeType) -> tuple[set[str], set[Any]]:
    """The names ``code`` and the code inside it look up (globals and attributes) and its
    constants."""
    names, constants = set(code.co_names), set()
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _looked_up(const)
            names |= inner[0]
            constants |= inner[1]
        elif isinstance(const, _PLAIN):
            constants.add(const)
    return names, constants


def _as_read(value: Any, names: set[str], keys: set[Any], more: Any) -> str:
    """A global ``value`` (or a method's object) as code that names ``names`` and constants
    ``keys`` reads it: of an object, the attributes it names (or names by a constant:
    ``getattr(cfg, "size")``) and the class's settings among them; of an object of the user's
    class, also what the methods and properties it calls read in turn, or all of it where
    that cannot be told (:func:`_read_through`); of a library's object, what its properties
    and ``__getattr__`` give (a config's settings)."""
    read = names | {k for k in keys if isinstance(k, str)}
    if isinstance(value, types.ModuleType):
        if not _users(getattr(value, "__file__", None)):
            return _module(value.__name__)
        attrs = {n: getattr(value, n) for n in sorted(read) if n in vars(value)}
        return f"module {_module(value.__name__)}{more(attrs)}"
    if type(value) is dict and all(_memoized(v) for v in itertools.islice(value.values(), _ITEMS)):
        # a memo of arrays or images (or none yet): the entries read by a constant key (told by
        # its first values: all of a memo of a dataset's images would cost every batch's look)
        return f"dict{more({k: value[k] for k in sorted(keys, key=repr) if k in value})}"
    simple = isinstance(value, (*_PLAIN, enum.Enum, list, tuple, set, frozenset))
    if simple or callable(value) or _is_array(value):  # (a class is callable)
        return more(value)
    state = _state(value)
    if state is None:
        return more(value)
    cls = type(value)
    mine = _users_class(cls)
    through = _read_through(cls, read, state) if mine else (read, [])
    if through is not None:
        read, functions = through  # (functions: the user's class's code that the code runs)
    getter = _class_attribute(cls, "__getattr__") is not _MISSING
    attrs = {}
    for n in sorted(read):
        found = state[n] if n in state else _class_attribute(cls, n)
        if n in state or (found is not _MISSING and _is_data(found)):
            attrs[n] = found  # an attribute, or a class's setting (set at run time, say)
        elif not mine and (isinstance(found, property) or (found is _MISSING and getter)):
            with contextlib.suppress(Exception):  # a library's object that gives settings as
                attrs[n] = getattr(value, n)  # attributes (a config's)
    if through is None:  # code that may read any attribute (a __getattr__): all of them
        methods = _methods(cls)
        whole = f"{more({**state, **attrs})}{_globals_read(methods, more, cls)}"
        return f"{_name(cls)}#{_code_of(cls, methods)}{whole}"
    return f"{_name(cls)}#{_code_of(cls)}{more(attrs)}{_globals_read(functions, more)}"


#: the names of what reads an object's attribute by a name the code may compute
_BY_NAME = frozenset({"getattr", "vars", "__dict__"})


def _read_through(
    cls: type, read: set[str], state: dict[str, Any]
) -> tuple[set[str], list[Any]] | None:
    """The names that code naming ``read`` reads of an object of the user's class ``cls``
    whose attributes are ``state``: those, and those that the class's methods and properties
    among them name in turn (``cfg.crop()`` reads what ``crop`` reads), with those functions.
    None where that cannot be told: a ``__getattr__``, a library's method, another
    descriptor, code that may read an attribute by a name it computes (``getattr``,
    ``vars``, ``__dict__``)."""
    if read & _BY_NAME or _class_attribute(cls, "__getattr__") is not _MISSING:
        return None
    read, functions, todo = set(read), [], sorted(read)
    while todo:
        name = todo.pop()
        code = [] if name in state else _code_under(_class_attribute(cls, name))
        if code is None or not all(_users(f.__code__.co_filename) for f in code):
            return None
        for f in code:
            functions.append(f)
            named, constants = _looked_up(f.__code__)
            if named & _BY_NAME:
                return None
            new = (named | {k for k in constants if isinstance(k, str)}) - read
            read |= new
            todo += sorted(new)
    return read, functions


def _code_under(found: Any) -> list[Any] | None:
    """The functions that a class attribute ``found`` runs when read through an object: a
    method's, a property's; none for data (or nothing found); None for what cannot be told (a
    descriptor of another kind, a property whose getter is built in)."""
    if found is _MISSING or _is_data(found):
        return []
    parts = _parts(found)
    return list(parts) if parts and all(isinstance(f, types.FunctionType) for f in parts) else None


def _parts(attr: Any) -> tuple[Any, ...]:
    """What a class attribute ``attr`` runs when read through an object: a method's function,
    a property's getter, setter and deleter (which may be built in), a ``cached_property``'s
    function; () for anything else."""
    if isinstance(attr, types.FunctionType):
        return (attr,)
    if isinstance(attr, staticmethod | classmethod):
        return (attr.__func__,)
    if isinstance(attr, property):
        return tuple(f for f in (attr.fget, attr.fset, attr.fdel) if f is not None)
    return (attr.func,) if isinstance(attr, functools.cached_property) else ()


def _is_data(attr: Any) -> bool:
    """Whether a class attribute ``attr`` is data (a setting, a table), not code read through
    an object (a method, a property, another descriptor)."""
    return not hasattr(type(attr), "__get__")


def _memoized(value: Any) -> bool:
    """Whether ``value`` is what a memo holds: an array or an image."""
    return _is_array(value) or _is_image(value)


#: what :func:`_class_attribute` gives for a name no class defines
_MISSING = object()


def _class_attribute(cls: type, name: str) -> Any:
    """What ``cls`` or a base of it other than ``object`` defines as ``name``, else
    ``_MISSING``."""
    for klass in cls.__mro__:
        if klass is not object and name in vars(klass):
            return vars(klass)[name]
    return _MISSING


def _table(value: Any, depth: int) -> bool:
    """Whether ``value`` is plain data (plain values, and lists, tuples and dicts of them, two
    levels deep): a global table of settings, named whole however the code reads it (by a key
    it computes, say)."""
    if isinstance(value, _PLAIN):
        return True
    if depth > 2 or not isinstance(value, list | tuple | dict):
        return False
    items = itertools.chain.from_iterable(value.items()) if isinstance(value, dict) else value
    return all(_table(x, depth + 1) for x in items)


def _class(cls: type, more: Any) -> str:
    """A class: its name; a class of the user's (one with methods of the user's code) also its
    source and the globals its methods read."""
    methods = _methods(cls)
    if not any(_users(f.__code__.co_filename) for f in methods):
        return _name(cls)
    return f"{_name(cls)}#{_code_of(cls, methods)}{_globals_read(methods, more, cls)}"


def _methods(cls: type) -> list[Any]:
    """The functions of ``cls`` and of its bases (their methods, static and class methods,
    properties' and cached properties' functions, less those built in: :func:`_parts`)."""
    return [
        f
        for klass in cls.__mro__
        for attr in vars(klass).values()
        for f in _parts(attr)
        if isinstance(f, types.FunctionType)
    ]


def _code(code: types.CodeType) -> str:
    """A function's bytecode, constants (nested functions' code in turn) and names."""
    consts = [_const(c) for c in code.co_consts]
    return f"{code.co_code.hex()}{consts}{code.co_names}"


def _const(const: Any) -> str:
    """A constant of a function's code: nested code in turn, a set (``x in {"a", "b"}``) in
    an order that is the same in every process (its own follows the strings' hashes)."""
    if isinstance(const, types.CodeType):
        return _code(const)
    if isinstance(const, frozenset):
        return f"frozenset{sorted(map(repr, const))}"
    return repr(const)


def _shown_by_repr(obj: Any, depth: int) -> bool:
    """Whether ``obj``'s ``repr`` shows all it does: a torchvision step whose attributes are
    plain values, tensors and such steps in turn (not a function, which a ``Lambda``'s repr
    does not show, nor a step of the user's, which a ``RandomApply``'s may not)."""
    if isinstance(obj, (*_PLAIN, enum.Enum)) or _is_array(obj):
        return True
    if depth > _DEPTH:
        return False
    if isinstance(obj, list | tuple | set | frozenset):
        return all(_shown_by_repr(x, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return all(_shown_by_repr(x, depth + 1) for x in (*obj.keys(), *obj.values()))
    if type(obj).__module__.split(".")[0] not in _REPR_NAMES or _ADDRESS.search(repr(obj)):
        return False
    return _shown_by_repr(getattr(obj, "__dict__", {}), depth + 1)


def _state(obj: Any) -> dict[str, Any] | None:
    """``obj``'s attributes: its ``__dict__`` and the values of the slots of the user's classes
    (a class with ``__slots__``, a ``dataclass(slots=True)``; a library's slots may be caches
    set lazily, as a ``pathlib.Path``'s are, which would name it otherwise in every process);
    None when it has neither (a C type's)."""
    own = getattr(obj, "__dict__", None)
    state = dict(own) if own is not None else None
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ()) if _users_class(cls) else ()
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            if slot.startswith("__") and not slot.endswith("__"):  # stored under its mangled name
                slot = f"_{cls.__name__.lstrip('_')}{slot}"
            state = {} if state is None else state
            with contextlib.suppress(AttributeError):  # a slot never set
                state.setdefault(slot, getattr(obj, slot))
    return state


def _users_class(cls: type) -> bool:
    """Whether ``cls`` is of the user's code: its module's file, or its methods' code (a class
    of a notebook cell, a dataclass's generated methods)."""
    module = sys.modules.get(cls.__module__)
    if _users(getattr(module, "__file__", None)):
        return True
    code = [getattr(f, "__code__", None) for f in vars(cls).values()]
    return any(_users(c.co_filename) for c in code if c is not None)


def _is_image(obj: Any) -> bool:
    """Whether ``obj`` is a PIL image (whose pixels its attributes hold in a C object)."""
    return type(obj).__module__.startswith("PIL.") and all(
        hasattr(obj, name) for name in ("tobytes", "mode", "size", "getpalette")
    )


def _image(image: Any, more: Any) -> str:
    """A PIL image a step holds (an overlay it pastes, a mask): its mode, size, a hash of its
    pixels, its palette and its ``info``."""
    if _GLANCING.get():
        return f"image@{id(image)}({image.mode}, {image.size})"
    pixels = hashlib.sha1(image.tobytes()).hexdigest()[:10]
    palette = more(image.getpalette())
    return (
        f"{_name(type(image))}({image.mode}, {image.size}, {pixels}, {palette}, {more(image.info)})"
    )


#: what a torch module holds besides its public attributes: its submodules (an
#: ``nn.Sequential``'s steps), parameters and buffers
_MODULE_PARTS = ("_modules", "_parameters", "_buffers")


def _attributes(obj: Any) -> dict[str, Any]:
    """The public attributes of ``obj``, a step its ``repr`` names, and what it holds as a
    torch module."""
    state = getattr(obj, "__dict__", {})
    shown = {k: v for k, v in state.items() if not k.startswith("_")}
    shown.update((k, state[k]) for k in _MODULE_PARTS if state.get(k))
    return shown


def _is_array(obj: Any) -> bool:
    """Whether ``obj`` is a tensor or a numpy array (or scalar)."""
    kind = type(obj).__module__.split(".")[0]
    if kind == "torch":
        return hasattr(obj, "untyped_storage")
    return kind == "numpy" and hasattr(obj, "tobytes") and hasattr(obj, "dtype")


def _array(obj: Any) -> str:
    """A tensor or numpy array: its dtype, shape and a hash of its bytes."""
    if _GLANCING.get():
        return f"array@{id(obj)}({obj.dtype}, {tuple(obj.shape)})"
    if hasattr(obj, "untyped_storage"):
        import torch

        flat = obj.detach().cpu().contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    else:
        data = obj.tobytes()
    return f"array({obj.dtype}, {tuple(obj.shape)}, {hashlib.sha1(data).hexdigest()[:10]})"
