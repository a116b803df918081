"""Libraries' internals through one adapter each: ``seneca/_torch_internals.py`` (torch) and
``ods/redis_internals.py`` (redis-py). No other module reads a private attribute it does not
define, or overrides a library class's private method; each adapter names the versions it was
checked against, which follow ``pyproject.toml``'s lower bounds and ``constraints.txt``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re

import pytest
from test_layout import ADAPTERS, MODULES, ROOT, findings

#: underscored names that are public API (documented by Python)
PUBLIC = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}
PACKAGES = ("seneca", "ods", "mdp", "seneca_base")


def _private(name: str) -> bool:
    """``_name``, not a dunder, a sunder (``_missing_``: enum's API) or in :data:`PUBLIC`."""
    return name.startswith("_") and not name.endswith("_") and name not in PUBLIC


def _defined(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, names assigned anywhere, and
    attributes assigned on ``self`` or ``cls``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
    return out


def _foreign_private_reads(tree: ast.AST) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls`` and the module defines no
    ``_name``: another module's private, or a library's internal."""
    defined = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in defined:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_adapters_read_internals():
    assert findings(_foreign_private_reads, skip=ADAPTERS) == {}


def test_the_private_read_check_finds_foreign_reads():
    code = (
        "class A:\n    def _mine(self):\n        self._x = 1\n"
        "a = A()\na._mine()\na._x\nconn._sock\ntorch._C._f(s._cdata)\nsuper()._get_iterator()\n"
        "os._exit(0)\nt._replace(a=1)\nself._y\n"
    )
    found = {f.split(": ")[1] for f in _foreign_private_reads(ast.parse(code))}
    assert found == {"conn._sock", "torch._C._f", "torch._C", "s._cdata", "super()._get_iterator"}


def _overridden_internals(module_name: str) -> list[str]:
    """Private methods that a class of the module defines over one of a library base's."""
    module = importlib.import_module(module_name)
    found = []
    for cls in vars(module).values():
        if not inspect.isclass(cls) or cls.__module__ != module_name:
            continue
        for name, value in vars(cls).items():
            if not _private(name) or not inspect.isfunction(value):
                continue
            for base in cls.__mro__[1:]:
                ours = base.__module__.split(".")[0] in PACKAGES
                if not ours and base is not object and name in vars(base):
                    found.append(f"{cls.__name__}.{name} overrides {base.__module__}")
    return sorted(set(found))


def test_only_the_adapters_override_library_internals():
    found = {
        name: hits
        for name in MODULES
        if name not in ADAPTERS and name != "seneca.__main__"
        if (hits := _overridden_internals(name))
    }
    assert found == {}
    assert _overridden_internals("seneca._torch_internals") == [
        "ReadThroughLoader._get_iterator overrides torch.utils.data.dataloader"
    ]


def _library_private_writes(module_name: str) -> list[str]:
    """``self._name = ...`` in a class of the module whose library base (in its MRO, not ours)
    uses ``self._name`` too: a write into the library's internals."""
    module = importlib.import_module(module_name)
    found = []
    for node in ast.walk(ast.parse(MODULES[module_name].read_text())):
        cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
        if not inspect.isclass(cls):
            continue
        bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] not in PACKAGES]
        sources = "".join(inspect.getsource(b) for b in bases if b.__module__ != "builtins")
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.ctx, ast.Store)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
                and _private(sub.attr)
                and re.search(rf"self\.{sub.attr}\b", sources)
            ):
                found.append(f"{sub.lineno}: {node.name} writes self.{sub.attr}")
    return found


def test_only_the_adapters_write_library_internals_on_self():
    """A subclass of a library class (SenecaLoader of DataLoader) sets none of the library's
    private attributes outside the adapter (here DataLoader's ``_iterator``)."""
    found = {
        name: hits
        for name in MODULES
        if name not in ADAPTERS and name != "seneca.__main__"
        if (hits := _library_private_writes(name))
    }
    assert found == {}


def test_the_library_write_check_finds_a_write(tmp_path, monkeypatch):
    code = (
        "from torch.utils.data import DataLoader\n"
        "class L(DataLoader):\n    def close(self):\n        self._iterator = None\n"
        "        self._mine = 1\n"
    )
    (tmp_path / "writes_internals.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(MODULES, "writes_internals", tmp_path / "writes_internals.py")
    assert _library_private_writes("writes_internals") == ["4: L writes self._iterator"]


def _oldest():
    spec = importlib.util.spec_from_file_location("oldest", ROOT / "scripts" / "oldest.py")
    oldest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oldest)
    return oldest


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_each_adapter_was_checked_against_the_oldest_and_the_pinned_versions(adapter):
    library = ADAPTERS[adapter]
    oldest = _oldest()
    assert library in oldest.OLDEST  # CI runs the loader's tests with its oldest version
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    checked = importlib.import_module(adapter).CHECKED
    assert checked == (oldest.lower_bounds()[library], pins[library])
