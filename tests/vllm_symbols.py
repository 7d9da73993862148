"""Which vLLM symbols kconvert's live path uses, read from kconvert's own code with `ast`, and whether a vLLM release's
Python files define them with a compatible signature, read from that release's files with `ast` (nothing imported,
nothing run). tests/test_vllm_symbols.py holds vLLM 0.34.0 (and 0.33.0, and the installed 0.32.0) to it.

What is enumerated from kconvert's code (KCONVERT_FILES):
- every `from vllm... import NAME` and `import vllm...`: the module exists and defines NAME (a def, a class, an
  assignment, a re-export, a submodule, or an entry of a package's lazy `MODULE_ATTRS`);
- every instance of an imported vLLM class a function makes (`llm = LLM(...)`), and what it reaches from it through
  the release's own annotations (`llm.generate(...)` -> `list[RequestOutput]` -> `o.outputs[0]` ->
  `CompletionOutput.token_ids`): each attribute and method exists, and each keyword a call passes is a parameter
  (or the callee takes **kwargs); `getattr(obj, "name", default)` is a guarded read and is not required;
- every class kconvert derives from a vLLM class: the methods it overrides exist in a base with as many positional
  parameters, and every `self.X` it reads without setting is set by a base;
- the keys kconvert puts in `LLM(**engine_args)` and `SamplingParams(**sampling)` (string keys of the dict literals
  and subscript assignments of those names): each is a parameter of `LLM.__init__`, a field of `EngineArgs`, or a
  field of `SamplingParams`;
- the files `kconvert trace --engine vllm` requires (record_vllm.py RECORDING_MODULES).

What it cannot tell: anything a call does at run time (a kernel, a default changed, an argument accepted but
ignored), attributes set dynamically (setattr, __getattr__) or typed by no annotation (reported as unresolved, not
failed), and the worker extension's `self`, which is vLLM's worker only at run time (its host class is named here:
WORKER_HOST, v1/worker/worker_base.py WorkerBase, whose subclasses GPU and CPU workers are).
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
KCONVERT_FILES = sorted((ROOT / "kconvert" / "runners").glob("*.py")) + [ROOT / "kconvert" / "trace" / "record_vllm.py"]
# The worker extension (kconvert/runners/worker_probe.py) is mixed into vLLM's worker by `worker_extension_cls`:
# its `self` is a WorkerBase (v1/worker/worker_base.py; gpu_worker.Worker and cpu_worker.CPUWorker derive from it)
WORKER_HOST = ("vllm.v1.worker.worker_base", "WorkerBase")


@dataclass
class Use:
    where: str  # kconvert file:line
    symbol: str  # what is used, as vLLM names it
    ok: bool | None  # None: not resolvable from annotations (not a failure)
    why: str = ""


@dataclass
class Cls:
    module: str
    node: ast.ClassDef


class Release:
    """A release's Python files, read with ast."""

    def __init__(self, root: Path):
        self.root = root  # the folder holding vllm/

    @functools.lru_cache(maxsize=None)
    def file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
        return None

    @functools.lru_cache(maxsize=None)
    def tree(self, module: str) -> ast.Module | None:
        p = self.file(module)
        return ast.parse(p.read_text()) if p else None

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        pkg = module if (self.file(module) or Path()).name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            pkg = pkg.rpartition(".")[0]
        return f"{pkg}.{node.module}" if node.module else pkg

    def resolve(self, module: str, name: str, depth: int = 0) -> Any:
        """A top-level name of a module: ("class", Cls) / ("func", node) / ("module", name) / ("value", node)."""
        if depth > 12:
            return None
        tree = self.tree(module)
        if tree is None:
            return None
        for node in self._top(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return ("class", Cls(module, node))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return ("func", node)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return ("value", node)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return ("value", node)
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":  # `from .parallel_state import *`
                        r = self.resolve(self._absolute(module, node), name, depth + 1)
                        if r and r[0] != "module":
                            return r
                    if (a.asname or a.name) == name:
                        return self.resolve(self._absolute(module, node), a.name, depth + 1) or (
                            ("module", f"{self._absolute(module, node)}.{a.name}")
                            if self.file(f"{self._absolute(module, node)}.{a.name}") else None)
        if self.file(f"{module}.{name}"):
            return ("module", f"{module}.{name}")
        # a package's lazy attributes (vllm/__init__.py MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM", ...})
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == name and isinstance(v, ast.Constant) \
                            and isinstance(v.value, str) and ":" in v.value:
                        mod, _, attr = v.value.partition(":")
                        target = f"{module}{mod}" if mod.startswith(".") else mod
                        return self.resolve(target, attr, depth + 1)
        return None

    @staticmethod
    def _top(tree: ast.Module) -> Iterator[ast.stmt]:
        for node in tree.body:
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks and the like
                yield from node.body
                yield from node.orelse
            elif isinstance(node, ast.Try):
                yield from node.body
            else:
                yield node

    # ---- classes
    def has_foreign_base(self, c: Cls, seen: frozenset = frozenset()) -> bool:
        """A base this release does not define (transformers' PreTrainedConfig, torch's nn.Module): members it adds
        cannot be read here."""
        key = (c.module, c.node.name)
        if key in seen:
            return False
        named = [b for b in c.node.bases if not (isinstance(b, ast.Name) and b.id in ("object", "Generic", "ABC"))]
        ours = self.bases(c)
        return len(ours) < len(named) or any(self.has_foreign_base(b, seen | {key}) for b in ours)

    def lookup(self, c: Cls, name: str) -> bool | None:
        """True: the class (or a base) has it; True too when a class of its module derived from it has it (a
        `type(m).__name__ == "Counter"` branch reads a subclass's field); None: not here, but a base this release
        does not define may add it; False: nowhere."""
        if name in self.members(c):
            return True
        tree = self.tree(c.module)
        for node in (tree.body if tree else []):
            if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == c.node.name
                                                      for b in node.bases):
                if name in self.members(Cls(c.module, node)):
                    return True
        return None if self.has_foreign_base(c) else False

    def bases(self, c: Cls) -> list[Cls]:
        out = []
        for b in c.node.bases:
            name = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
            if isinstance(b, ast.Subscript):
                name = b.value.id if isinstance(b.value, ast.Name) else None
            r = self.resolve(c.module, name) if name else None
            if r and r[0] == "class":
                out.append(r[1])
        return out

    def members(self, c: Cls, seen: frozenset = frozenset()) -> dict[str, tuple[str, Any, Cls]]:
        """name -> (kind, node, owner): methods, class-level fields, `self.X` set in any method; bases included."""
        key = (c.module, c.node.name)
        if key in seen:
            return {}
        out: dict[str, tuple[str, Any, Cls]] = {}
        for b in reversed(self.bases(c)):
            out.update(self.members(b, seen | {key}))
        for node in c.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                prop = any(isinstance(d, ast.Name) and d.id in ("property", "cached_property") or
                           isinstance(d, ast.Attribute) and d.attr == "cached_property" for d in node.decorator_list)
                out[node.name] = ("property" if prop else "method", node, c)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out[node.target.id] = ("field", node, c)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        out.setdefault(t.id, ("field", node, c))
        for node in ast.walk(c.node):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.setdefault(t.attr, ("self", node, c))
        return out

    def annotation_class(self, module: str, ann: ast.expr | None, *, element: bool = False) -> Cls | None:
        """The vLLM class an annotation names (Optional/union/string forms; `element`: the X of list[X])."""
        if ann is None:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(ann, ast.BinOp):  # X | None
            return self.annotation_class(module, ann.left, element=element) or self.annotation_class(
                module, ann.right, element=element)
        if isinstance(ann, ast.Subscript):
            outer = ann.value.id if isinstance(ann.value, ast.Name) else getattr(ann.value, "attr", "")
            inner = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if outer in ("Optional", "Union", "ClassVar", "Annotated", "Final"):
                return next((c for c in (self.annotation_class(module, i, element=element) for i in inner) if c),
                            None)
            if element and outer in ("list", "List", "Sequence", "tuple", "Tuple", "Iterable", "Iterator"):
                return self.annotation_class(module, inner[0])
            return None
        if element:
            return None
        name = ann.id if isinstance(ann, ast.Name) else ann.attr if isinstance(ann, ast.Attribute) else None
        r = self.resolve(module, name) if name else None
        return r[1] if r and r[0] == "class" else None

    def member_type(self, c: Cls, name: str, *, element: bool = False) -> Cls | None:
        m = self.members(c).get(name)
        if m is None:
            return None
        kind, node, owner = m
        if kind in ("method", "property"):
            return self.annotation_class(owner.module, node.returns, element=element)
        if kind == "field" and isinstance(node, ast.AnnAssign):
            return self.annotation_class(owner.module, node.annotation, element=element)
        if kind == "self":
            if isinstance(node, ast.AnnAssign):
                return self.annotation_class(owner.module, node.annotation, element=element)
            # self.x = x, with x a parameter annotated in the method that sets it
            if isinstance(node.value, ast.Name):
                for f in ast.walk(owner.node):
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and node in ast.walk(f):
                        for a in f.args.args + f.args.kwonlyargs:
                            if a.arg == node.value.id:
                                return self.annotation_class(owner.module, a.annotation, element=element)
        return None

    def callable_params(self, node: Any) -> tuple[set[str], int, bool, bool]:
        """(keyword names, positional slots after self, takes *args, takes **kwargs) of a def, or of a class's
        fields (a dataclass / msgspec.Struct / TypedDict built by keyword)."""
        if isinstance(node, Cls):
            m = self.members(node)
            if "__init__" in m and m["__init__"][0] == "method":
                return self.callable_params(m["__init__"][1])
            fields_ = {k for k, (kind, n, _) in m.items() if kind == "field" and isinstance(n, ast.AnnAssign)}
            return fields_, len(fields_), False, False
        a = node.args
        pos = [x.arg for x in a.posonlyargs + a.args]
        if pos and pos[0] in ("self", "cls"):
            pos = pos[1:]
        return set(pos) | {x.arg for x in a.kwonlyargs}, len(pos), a.vararg is not None, a.kwarg is not None


def _imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """local name -> (vllm module, name) of `from vllm... import NAME`, anywhere in the file (deferred imports too)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm" and not node.level:
            for a in node.names:
                out[a.asname or a.name] = (node.module, a.name)
    return out


def _string_keys(tree: ast.Module, names: tuple[str, ...]) -> dict[str, int]:
    """String keys kconvert puts in the dicts bound to `names`: dict literals assigned to them (or to a key of that
    name), subscript assignments, and the first argument of `.arg(KEY, ...)` (vllm_args.py's AutoSettings)."""
    out: dict[str, int] = {}

    def lit(d: ast.Dict) -> None:
        for k in d.keys:
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.setdefault(k.value, k.lineno)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                isinstance(t, ast.Name) and t.id in names for t in node.targets):
            lit(node.value)
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value in names and isinstance(v, ast.Dict):
                    lit(v)
        if isinstance(node, ast.keyword) and node.arg in names and isinstance(node.value, ast.Dict):
            lit(node.value)
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names \
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
                    out.setdefault(t.slice.value, node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "arg" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.setdefault(node.args[0].value, node.lineno)
    return out


def check(release: Release) -> list[Use]:
    uses: list[Use] = []
    for path in KCONVERT_FILES:
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text())
        imported = _imports(tree)
        # 1. imports (one inside `try: ... except ImportError` is asked of a release that may lack it: optional)
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in t.handlers)
                    for b in t.body for n in ast.walk(b)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
                for a in node.names:
                    r = release.resolve(node.module, a.name)
                    if r is None and id(node) in optional:
                        continue
                    uses.append(Use(f"{rel}:{node.lineno}", f"{node.module}.{a.name}", r is not None,
                                    "" if r else "not defined"))
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "vllm":
                        ok = release.file(a.name) is not None
                        uses.append(Use(f"{rel}:{node.lineno}", a.name, ok, "" if ok else "no such module"))
        # 2. instances of vLLM classes and what they reach, per function (parameters typed by their callers)
        params = _call_site_params(release, tree, imported)
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            uses += _walk_function(release, rel, fn, imported, params.get(fn.name))
        # 3. subclasses of vLLM classes
        for c in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            uses += _subclass(release, rel, c, imported)
    uses += _keyword_dicts(release)
    uses += _worker_probe(release)
    uses += _recording_modules(release)
    return uses


def _class_of(release: Release, imported: dict, name: str) -> Cls | None:
    if name not in imported:
        return None
    r = release.resolve(*imported[name])
    return r[1] if r and r[0] == "class" else None


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function, not those of the functions and classes defined inside it (their own scopes)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _walk_function(release: Release, rel: Path, fn: ast.FunctionDef, imported: dict,
                   params: dict[str, tuple[Cls, bool]] | None = None) -> list[Use]:
    uses: list[Use] = []
    types: dict[str, tuple[Cls, bool]] = dict(params or {})  # var -> (class, is a list of it)

    def type_of(expr: ast.expr) -> tuple[Cls, bool] | None:
        if isinstance(expr, ast.Name):
            return types.get(expr.id)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            c = _class_of(release, imported, expr.func.id)
            return (c, False) if c else None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            base = type_of(expr.func.value)
            if base and not base[1]:
                el = release.member_type(base[0], expr.func.attr, element=True)
                if el:
                    return el, True
                one = release.member_type(base[0], expr.func.attr)
                return (one, False) if one else None
        if isinstance(expr, ast.Attribute):
            base = type_of(expr.value)
            if base and not base[1]:
                el = release.member_type(base[0], expr.attr, element=True)
                if el:
                    return el, True
                one = release.member_type(base[0], expr.attr)
                return (one, False) if one else None
        if isinstance(expr, ast.Subscript):
            base = type_of(expr.value)
            if base and base[1]:
                return base[0], False
        return None

    nodes = sorted(_own_nodes(fn), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    for _ in range(2):  # a variable typed later in the walk than its first use
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                t = type_of(node.value)
                if t:
                    types[node.targets[0].id] = t
            if isinstance(node, (ast.comprehension, ast.For)) and isinstance(node.target, ast.Name):
                t = type_of(node.iter)
                if t and t[1]:
                    types[node.target.id] = (t[0], False)
    for node in nodes:
        if isinstance(node, ast.Attribute):
            base = type_of(node.value)
            if base is None or base[1]:
                continue
            c = base[0]
            found = release.lookup(c, node.attr)
            uses.append(Use(f"{rel}:{node.lineno}", f"{c.module}.{c.node.name}.{node.attr}", found,
                            "" if found else "no such attribute or method" if found is False else
                            "not in vLLM's code; a base from another package may define it"))
        if isinstance(node, ast.Call):
            target = None
            if isinstance(node.func, ast.Name):
                target = _class_of(release, imported, node.func.id)
                label = f"{imported.get(node.func.id, ('', ''))[0]}.{node.func.id}"
            elif isinstance(node.func, ast.Attribute):
                base = type_of(node.func.value)
                if base and not base[1]:
                    m = release.members(base[0]).get(node.func.attr)
                    target = m[1] if m and m[0] == "method" else None
                    label = f"{base[0].module}.{base[0].node.name}.{node.func.attr}"
            if target is None:
                continue
            names, npos, star, kwargs = release.callable_params(target)
            given = [k.arg for k in node.keywords if k.arg]
            bad = [k for k in given if k not in names and not kwargs]
            too_many = len(node.args) > npos and not star
            uses.append(Use(f"{rel}:{node.lineno}", f"{label}({', '.join(given)})", not bad and not too_many,
                            f"unknown keywords {bad}" if bad else "too many positional arguments" if too_many else ""))
    return uses


def _call_site_params(release: Release, tree: ast.Module, imported: dict) -> dict[str, dict[str, tuple[Cls, bool]]]:
    """Parameters of a module's own functions typed by what their callers pass (`_attention_backends(llm)` with
    `llm = LLM(...)`; `metrics_to_json(llm.get_metrics())`)."""
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    out: dict[str, dict[str, tuple[Cls, bool]]] = {}
    for caller in funcs.values():
        typed: dict[str, tuple[Cls, bool]] = {}
        _walk_function_types(release, caller, imported, typed)
        for node in _own_nodes(caller):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs:
                callee = funcs[node.func.id]
                names = [a.arg for a in callee.args.args]
                for i, arg in enumerate(node.args[:len(names)]):
                    t = _expr_type(release, imported, typed, arg)
                    if t:
                        out.setdefault(callee.name, {})[names[i]] = t
    return out


def _expr_type(release: Release, imported: dict, types: dict, expr: ast.expr) -> tuple[Cls, bool] | None:
    if isinstance(expr, ast.Name):
        return types.get(expr.id)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        c = _class_of(release, imported, expr.func.id)
        return (c, False) if c else None
    if isinstance(expr, (ast.Call, ast.Attribute)):
        owner = expr.func.value if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) else \
            expr.value if isinstance(expr, ast.Attribute) else None
        name = expr.func.attr if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) else \
            expr.attr if isinstance(expr, ast.Attribute) else None
        base = _expr_type(release, imported, types, owner) if owner is not None else None
        if base and not base[1] and name:
            el = release.member_type(base[0], name, element=True)
            if el:
                return el, True
            one = release.member_type(base[0], name)
            return (one, False) if one else None
    if isinstance(expr, ast.Subscript):
        base = _expr_type(release, imported, types, expr.value)
        if base and base[1]:
            return base[0], False
    return None


def _walk_function_types(release: Release, fn: ast.AST, imported: dict, types: dict) -> None:
    for _ in range(2):
        for node in sorted(_own_nodes(fn), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                t = _expr_type(release, imported, types, node.value)
                if t:
                    types[node.targets[0].id] = t


def _subclass(release: Release, rel: Path, c: ast.ClassDef, imported: dict) -> list[Use]:
    uses: list[Use] = []
    bases = [b for b in (_class_of(release, imported, x.id) for x in c.bases if isinstance(x, ast.Name)) if b]
    if not bases:
        return uses
    inherited: dict[str, tuple[str, Any, Cls]] = {}
    for b in bases:
        inherited.update(release.members(b))
    own_set = {t.attr for n in ast.walk(c) for t in (n.targets if isinstance(n, ast.Assign) else [])
               if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    for node in c.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in inherited:
            kind, base_fn, owner = inherited[node.name]
            ok = kind == "method" and release.callable_params(base_fn)[1] == release.callable_params(node)[1]
            uses.append(Use(f"{rel}:{node.lineno}", f"{owner.module}.{owner.node.name}.{node.name} (overridden)", ok,
                            "" if ok else "the base's method takes other positional parameters"))
    for node in ast.walk(c):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and isinstance(node.ctx, ast.Load) and node.attr not in own_set \
                and node.attr not in {n.name for n in c.body if isinstance(n, ast.FunctionDef)}:
            ok = node.attr in inherited
            uses.append(Use(f"{rel}:{node.lineno}", f"{bases[0].module}.{bases[0].node.name}.{node.attr} (inherited)",
                            ok, "" if ok else "no base sets it"))
    return uses


def _keyword_dicts(release: Release) -> list[Use]:
    """LLM(**engine_args) and SamplingParams(**sampling): each key kconvert can put there."""
    uses: list[Use] = []
    llm = release.resolve("vllm", "LLM")
    ea = release.resolve("vllm.engine.arg_utils", "EngineArgs")
    sp = release.resolve("vllm", "SamplingParams")
    llm_names = release.callable_params(release.members(llm[1])["__init__"][1])[0] if llm else set()
    ea_fields = {k for k, (kind, n, _) in release.members(ea[1]).items() if kind == "field"} if ea else set()
    sp_fields = {k for k, (kind, n, _) in release.members(sp[1]).items() if kind == "field"} if sp else set()
    files = {"engine": [ROOT / "kconvert" / "runners" / f for f in ("vllm_args.py", "vllm_worker.py")],
             "sampling": [ROOT / "kconvert" / "runners" / "vllm_offline.py", ROOT / "kconvert" / "trace" /
                          "record_vllm.py"]}
    for path in files["engine"]:
        for key, line in _string_keys(ast.parse(path.read_text()), ("args", "engine_args")).items():
            ok = key in llm_names or key in ea_fields
            uses.append(Use(f"{path.relative_to(ROOT)}:{line}", f"LLM(**engine_args)[{key!r}]", ok,
                            "" if ok else "neither an LLM parameter nor an EngineArgs field"))
    for path in files["sampling"]:
        for key, line in _string_keys(ast.parse(path.read_text()), ("sampling", "sampling_extra")).items():
            ok = key in sp_fields
            uses.append(Use(f"{path.relative_to(ROOT)}:{line}", f"SamplingParams(**sampling)[{key!r}]", ok,
                            "" if ok else "not a SamplingParams field"))
    return uses


def _worker_probe(release: Release) -> list[Use]:
    """worker_probe.py's `self.a.b.c` chains (not the getattr-guarded reads), from the worker host's annotations."""
    uses: list[Use] = []
    host = release.resolve(*WORKER_HOST)
    path = ROOT / "kconvert" / "runners" / "worker_probe.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        chain, cur = [], node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not (isinstance(cur, ast.Name) and cur.id == "self") or len(chain) < 2:
            continue
        chain.reverse()
        c = host[1] if host else None
        for i, attr in enumerate(chain):
            if c is None:
                uses.append(Use(f"{path.relative_to(ROOT)}:{node.lineno}", "self." + ".".join(chain[:i + 1]), None,
                                "type not annotated"))
                break
            found = attr in release.members(c)
            uses.append(Use(f"{path.relative_to(ROOT)}:{node.lineno}", f"{c.module}.{c.node.name}.{attr}", found,
                            "" if found else "no such attribute"))
            if not found:
                break
            c = release.member_type(c, attr)
    return uses


def _recording_modules(release: Release) -> list[Use]:
    import importlib

    mod = importlib.import_module("kconvert.trace.record_vllm")
    uses = []
    for entry in mod.RECORDING_MODULES:
        options = entry if isinstance(entry, tuple) else (entry,)
        ok = any((release.root / "vllm" / o).is_file() for o in options)
        uses.append(Use("kconvert/trace/record_vllm.py RECORDING_MODULES", " or ".join(options), ok,
                        "" if ok else "no such file"))
    return uses


@dataclass
class Report:
    uses: list[Use] = field(default_factory=list)

    @property
    def failed(self) -> list[Use]:
        return [u for u in self.uses if u.ok is False]
