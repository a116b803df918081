"""The architecture, checked: which package may import which, no import cycles, no private
module used from another package. Static (the source's import statements, also those inside
functions), so it needs no torch and catches lazy imports too."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("seneca_base", "mdp", "ods", "seneca")

#: What each part may import (besides itself and third-party modules). ``seneca`` alone means
#: its top-level modules (``defaults``, ``errors``, the lazy ``__init__``).
ALLOWED = {
    "seneca_base": set(),
    "mdp": {"seneca_base"},
    "ods": {"seneca_base"},
    "seneca": {"seneca_base"},
    "seneca.pipeline": {"seneca", "seneca_base"},
    "seneca._cache": {"seneca", "seneca_base", "seneca.pipeline", "seneca._autoplan", "ods"},
    "seneca._autoplan": {"seneca", "seneca_base", "mdp", "ods"},
    "seneca.loader": {
        *("seneca", "seneca_base", "seneca.pipeline", "seneca._cache", "seneca._autoplan"),
        *("ods", "mdp"),
    },
    "seneca._bench": {
        *("seneca", "seneca_base", "seneca.pipeline", "seneca._cache", "seneca.loader"),
        *("seneca._autoplan", "mdp", "ods"),
    },
    "seneca._cli": {
        *("seneca", "seneca_base", "seneca.pipeline", "seneca._cache", "seneca.loader"),
        *("seneca._bench", "seneca._autoplan", "mdp", "ods"),
    },
}


#: module -> the library whose internals it adapts: the one place each library's private
#: attributes are read or written (tests/test_adapters.py)
ADAPTERS = {"seneca._torch_internals": "torch", "ods.redis_internals": "redis"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(name: str, path: Path, typing: bool = False) -> set[str]:
    """The modules of our packages that module ``name`` imports (``typing``: also those it
    imports only for type checkers)."""
    tree = ast.parse(path.read_text())
    skip = set() if typing else _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:
                    out.add(sub)
                elif base in MODULES:
                    out.add(base)
    out.discard(name)
    return out


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each module's imports (parsed when a test first asks: every test process collects this
    file, few run it)."""
    return {name: _imports(name, path) for name, path in MODULES.items()}


def _part(module: str) -> str:
    """The architectural part a module belongs to (a key of ALLOWED); ``seneca.__main__``
    (``python -m seneca``) is the command line's."""
    if module == "seneca.__main__":
        return "seneca._cli"
    parts = module.split(".")
    if parts[0] == "seneca" and len(parts) > 1 and f"seneca.{parts[1]}" in ALLOWED:
        return f"seneca.{parts[1]}"
    return parts[0]


def test_every_part_is_known():
    assert {_part(m) for m in MODULES} == set(ALLOWED)


def _named_modules(tree: ast.AST) -> set[str]:
    """Module paths of ``seneca`` given to a call or in a command line (``["-m",
    "seneca._cli.mdp"]``, ``import_module("seneca.x")``): imports the graph misses (a logger's
    name is not one)."""
    given = [
        arg
        for node in ast.walk(tree)
        for arg in (
            node.args
            if isinstance(node, ast.Call) and not ast.unparse(node.func).endswith("getLogger")
            else node.elts
            if isinstance(node, ast.List | ast.Tuple)
            else []
        )
    ]
    return {
        arg.value
        for arg in given
        if isinstance(arg, ast.Constant)
        and isinstance(arg.value, str)
        and re.fullmatch(r"seneca(\.\w+)+(:\w+)?", arg.value)
    }


def test_mdp_and_ods_import_nothing_from_seneca():
    for name, deps in graph().items():
        if _part(name) in ("mdp", "ods", "seneca_base"):
            bad = sorted(d for d in deps if d == "seneca" or d.startswith("seneca."))
            assert not bad, f"{name} imports {bad}"
            named = _named_modules(ast.parse(MODULES[name].read_text()))
            assert not named, f"{name} runs or imports {sorted(named)} by name"


def test_modules_named_in_strings_are_found():
    code = (
        '"""seneca.loader is fine in a docstring."""\nrun(["-m", "seneca._cli.mdp"])\nx = "seneca"'
    )
    assert _named_modules(ast.parse(code)) == {"seneca._cli.mdp"}


def test_each_part_imports_only_what_it_may():
    for name, deps in graph().items():
        part = _part(name)
        for dep in deps:
            other = _part(dep)
            assert other == part or other in ALLOWED[part], f"{name} ({part}) imports {dep}"


def _private_to(dep: str) -> list[str]:
    """The packages whose modules alone may import ``dep``: for each private part of its
    path (``seneca._cache``, ``seneca.loader._fetch``), the package that holds that part."""
    parts = dep.split(".")
    return [
        ".".join(parts[:k])
        for k, part in enumerate(parts)
        if part.startswith("_") and not part.startswith("__")
    ]


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_no_private_module_is_used_from_another_package():
    for name, deps in graph().items():
        for dep in deps:
            for package in _private_to(dep):
                assert _inside(name, package), f"{name} imports the private {dep}"


def test_the_private_check_knows_who_may_import():
    assert _private_to("seneca._cache.client") == ["seneca"]
    assert _private_to("seneca.loader._fetch") == ["seneca.loader"]
    assert _inside("seneca.loader.loader", "seneca.loader")
    assert not _inside("seneca._bench.harness", "seneca.loader")
    assert not _inside("ods.store", "seneca")


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or None."""
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state[dep] == 1:
                return [*stack[stack.index(dep) :], dep]
            if state[dep] == 0 and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state[node] == 0 and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_modules():
    assert _cycle(graph()) is None, " -> ".join(_cycle(graph()) or [])


def test_no_import_cycle_even_for_type_checkers():
    """Two modules that need each other's types are one concept split in two, or one of them
    names more than it needs."""
    typed = {name: _imports(name, path, typing=True) for name, path in MODULES.items()}
    assert _cycle(typed) is None, " -> ".join(_cycle(typed) or [])


def test_no_import_cycle_between_parts():
    parts: dict[str, set[str]] = defaultdict(set)
    for name, deps in graph().items():
        parts[_part(name)].update(_part(d) for d in deps if _part(d) != _part(name))
    assert _cycle(parts) is None, " -> ".join(_cycle(parts) or [])


def test_the_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("pkg", ["seneca", "mdp", "ods", "seneca_base"])
def test_packages_declare_their_public_names(pkg):
    for name, path in MODULES.items():
        if path.name == "__init__.py" and _part(name) in (pkg, *ALLOWED) and name.startswith(pkg):
            assert "__all__" in path.read_text(), f"{name} has no __all__"


def _foreign_private_writes(tree: ast.AST) -> list[str]:
    """``x._name = ...`` (also augmented, annotated, in a tuple, or into it: ``x._name[k] =
    ...``), any write through ``x.__dict__`` or ``vars(x)`` (``[k] = ...``, ``.setdefault``,
    ``.update`` and the like), ``setattr(x, "_name", ...)`` and ``object.__setattr__(x,
    "_name", ...)`` where ``x`` is not ``self`` or ``cls``."""

    def mine(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in ("self", "cls")

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    def their_dict(of: ast.AST) -> bool:
        """``x.__dict__`` or ``vars(x)`` with ``x`` not mine."""
        if isinstance(of, ast.Attribute) and of.attr == "__dict__":
            return not mine(of.value)
        return isinstance(of, ast.Call) and ast.unparse(of.func) == "vars" and not mine(of.args[0])

    def foreign(one: ast.AST) -> bool:
        if isinstance(one, ast.Attribute):
            return private(one.attr) and not mine(one.value)
        if isinstance(one, ast.Subscript):  # x._items[k] = ..., x.__dict__[k] = ...
            return their_dict(one.value) or foreign(one.value)
        return False

    writers = ("setdefault", "update", "__setitem__", "pop", "popitem", "clear")
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            for one in t.elts if isinstance(t, ast.Tuple | ast.List) else [t]:
                if foreign(one):
                    found.append(f"{node.lineno}: {ast.unparse(one)}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in writers and their_dict(func.value):
            found.append(f"{node.lineno}: {ast.unparse(node)}")  # x.__dict__.setdefault(...)
        if ast.unparse(func) in ("setattr", "object.__setattr__"):
            args = node.args
            name = args[1].value if len(args) >= 2 and isinstance(args[1], ast.Constant) else None
            if isinstance(name, str) and private(name) and not mine(args[0]):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def findings(check, skip=()) -> dict[str, list[str]]:
    """What ``check`` (an AST -> list of findings) finds in each package module and script,
    less the modules named in ``skip``."""
    scripts = {str(p.relative_to(ROOT)): p for p in (ROOT / "scripts").rglob("*.py")}
    return {
        name: found
        for name, path in {**MODULES, **scripts}.items()
        if name not in skip and (found := check(ast.parse(path.read_text())))
    }


def test_no_module_writes_another_objects_private_attributes():
    assert findings(_foreign_private_writes, skip=ADAPTERS) == {}


def test_the_private_write_check_finds_each_form():
    code = (
        "ds._ahead = 1\nself._ok = 1\na, ds._b = 1, 2\nds._c += 1\n"
        "setattr(ds, '_d', 1)\nobject.__setattr__(ds, '_e', 1)\nobject.__setattr__(self, '_f', 1)\n"
        "pool.__dict__['kept'] = 1\nvars(pool)['k'] = 1\nds._items[3] = 1\nself.__dict__['x'] = 1\n"
        "self._own[1] = 2\nds.public[0] = 1\npool.__dict__.setdefault('k', {})\n"
        "self.__dict__.update(a=1)"
    )
    found = _foreign_private_writes(ast.parse(code))
    assert [f.split(": ")[1] for f in found] == [
        "ds._ahead",
        "ds._b",
        "ds._c",
        "pool.__dict__['kept']",
        "vars(pool)['k']",
        "ds._items[3]",
        "setattr(ds, '_d', 1)",
        "object.__setattr__(ds, '_e', 1)",
        "pool.__dict__.setdefault('k', {})",
    ]


#: The libraries outside the standard library that mdp and ods may import, as CONTRIBUTING's
#: map says (the loader's layers may import torch and the rest)
LIBRARIES = {"mdp": {"numpy", "matplotlib"}, "ods": {"redis", "hiredis", "numpy"}}


def _libraries(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports that are neither ours nor Python's."""
    import sys

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if top not in PACKAGES and top not in sys.stdlib_module_names:
                out.add(top)
    return out


@pytest.mark.parametrize("package", sorted(LIBRARIES))
def test_mdp_and_ods_import_only_the_libraries_the_map_names(package):
    imported = set().union(
        *(_libraries(p) for n, p in MODULES.items() if n.split(".")[0] == package)
    )
    assert imported <= LIBRARIES[package], sorted(imported - LIBRARIES[package])
    text = (ROOT / "CONTRIBUTING.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith(f"{package}/ "))
    claimed = line + text.split(line, 1)[1].splitlines()[1]  # the entry and its next line
    for library in LIBRARIES[package]:
        assert {"redis": "redis-py"}.get(library, library) in claimed, (package, library)


def test_a_cache_failure_is_defined_once():
    """Every handler of a failing cache names ``ods.routing``'s definition (CACHE_FAILURES,
    or its parts OUTAGES and UNREACHABLE), never a tuple of its own: an ``except`` tuple that
    names a failure of the cache's connection beside another failure is a second definition."""
    from ods import routing

    caught = re.compile(r"(?:except|suppress)\s*\(([^)]*)\)")
    cache = {"redis.RedisError", "redis.ConnectionError", "redis.TimeoutError",
             "RedisClusterException"}  # fmt: skip
    other = cache | {"OSError", "CacheError", "SenecaError"}
    found = []
    for name, path in MODULES.items():
        if name == "ods.routing":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for names in caught.findall(line):
                named = {x.strip().lstrip("*") for x in names.split(",")}
                if named & cache and len(named & other) > 1:
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "\n".join(found)
    for part in (*routing.OUTAGES, *routing.UNREACHABLE):
        assert issubclass(part, routing.CACHE_FAILURES), part


def test_only_seneca_base_process_asks_which_process_runs():
    """Whether the caller is a forked child of the process that made an object, or a process
    starting a child, is asked of ``seneca_base.process`` alone: no other module compares
    process ids or asks multiprocessing or ``os`` itself."""
    asks = re.compile(
        r"getpid\(\)\s*[!=]=|[!=]=\s*os\.getpid\(\)|get_spawning_popen|register_at_fork"
    )
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for name, path in MODULES.items()
        if name != "seneca_base.process"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == [], "\n".join(found)


def test_a_fetch_runs_its_three_parts_and_only_it_knows_them():
    """A fetch is read, make and admit (``seneca.loader._fetch``): the make part has no link to
    the cache, the parts do not import one another, and only the fetch imports them."""
    imports = graph()
    parts = {f"seneca.loader._{p}" for p in ("read", "make", "admit")}
    assert "seneca.loader._link" not in imports["seneca.loader._make"]
    for part in parts:
        assert not imports[part] & parts, part
        users = {name for name, deps in imports.items() if part in deps}
        assert users == {"seneca.loader._fetch"}, (part, users)
