"""Reading one function (SPEC §15): what its code does with a generator and its resources,
under an entry (which parameters hold what), as a ``Summary``.

One role needs ``_Reader`` whole (about 360 lines): it walks one function's tree once, and its
visitors share the scope they build (names bound to roles, attributes stored), so splitting it
would pass that state between modules."""

from __future__ import annotations

import ast
import re

from genwire.generators.metadata import ResourceKind
from genwire.generators.scan_model import (
    ATTRIBUTE_CALLS,
    HARMLESS_CALLS,
    KIND_BY_ATTRIBUTE,
    KIND_BY_CALLER,
    KIND_BY_METHOD,
    RESOURCE_ATTRIBUTES,
    Call,
    Dynamic,
    Entry,
    Role,
    Summary,
    Use,
)

# --- reading one function -----------------------------------------------------------------------

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def function_key(first_line: int, name: str) -> str:
    """How a function is found again from its code object: ``co_firstlineno`` (the first
    decorator's line) and ``co_name``."""
    return f"{first_line}:{name}"


def key_of(node: FunctionNode) -> str:
    if isinstance(node, ast.Lambda):
        return function_key(node.lineno, "<lambda>")
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return function_key(first, node.name)


def param_names(node: FunctionNode) -> list[str]:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return names


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def assignment_parts(node: ast.AST | None) -> tuple[ast.AST | None, list[ast.expr]]:
    if isinstance(node, ast.Assign):
        return node.value, list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        return node.value, [node.target]
    return None, []


def _scope_nodes(root: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """The nodes of ``root``'s own scope, and the nested scopes (functions, lambdas,
    classes) met in it, whose bodies are read with their own names."""
    own: list[ast.AST] = []
    nested: list[ast.AST] = []
    body = root.body if isinstance(root, ast.Lambda) else getattr(root, "body", [])
    stack: list[ast.AST] = list(body) if isinstance(body, list) else [body]
    while stack:
        node = stack.pop()
        own.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            nested.append(node)
            # decorators, defaults and bases run in this scope
            heads: list[ast.AST] = list(getattr(node, "decorator_list", []))
            if isinstance(node, ast.ClassDef):
                heads += node.bases + [k.value for k in node.keywords]
            else:
                heads += [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
            stack.extend(heads)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return own, nested


class _Reader:
    """One function under one entry: walks its scope, then its nested scopes."""

    def __init__(self, fn: FunctionNode, entry: Entry) -> None:
        self.fn = fn
        self.fields = dict(entry.fields)
        self.summary = Summary()
        self.parents: dict[ast.AST, ast.AST] = {}
        self.local_defs: dict[str, str] = {}  # names of functions defined in enclosing scopes -> key
        first = param_names(fn)[:1]
        roles = dict(entry.params)
        self.method_self = first[0] if first and roles.get(first[0]) is Role.GEN else None
        self.handed: set[ast.AST] = set()  # calls already recorded

    def run(self, env: dict[str, Role]) -> Summary:
        self.parents = {c: n for n in ast.walk(self.fn) for c in ast.iter_child_nodes(n)}
        self.read_scope(self.fn, env, {})
        return self.summary

    # -- scopes --
    def read_scope(self, scope: ast.AST, env: dict[str, Role], defs: dict[str, str]) -> None:
        own, nested = _scope_nodes(scope)
        defs = dict(defs)
        for node in nested:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defs[node.name] = key_of(node)
        self.local_defs = defs
        env = dict(env)
        changed = True
        while changed:  # r = self.resources; s = r: aliases of aliases, in any order
            changed = False
            for node in own:
                value, targets = assignment_parts(node)
                role = self.role_of(value, env) if value is not None else None
                for t in targets:
                    if role is not None and isinstance(t, ast.Name) and env.get(t.id) is not role:
                        env[t.id] = role
                        changed = True
        for node in own:
            role = self.role_of(node, env)
            if role is not None:
                self.classify(node, role, env)
            elif isinstance(node, ast.Attribute) and self.role_of(node.value, env) in (Role.GEN, Role.HOLDER):
                kind = _kind_of_use(node, self.parents)  # self._model.complete(...): a hint for a stored handle
                if kind is not None:
                    self.summary.attr_kinds.setdefault(node.attr, []).append(kind.value)
        for inner in nested:
            if isinstance(inner, ast.ClassDef):
                # a class defined here: its body sees this scope; its methods' parameters are its own
                self.read_scope(inner, env, defs)
            else:
                shadowed = set(param_names(inner))  # type: ignore[arg-type]
                self.read_scope(inner, {k: v for k, v in env.items() if k not in shadowed}, defs)

    # -- what an expression is --
    def role_of(self, node: ast.AST | None, env: dict[str, Role]) -> Role | None:
        if not isinstance(getattr(node, "ctx", None) or ast.Load(), ast.Load):
            return None  # a target being assigned or deleted
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.role_of(node.value, env)
            if base is Role.GEN:
                if node.attr in RESOURCE_ATTRIBUTES:
                    return Role.RES
                if node.attr == "__dict__":
                    return Role.NS
            if base in (Role.GEN, Role.HOLDER):
                return self.fields.get(node.attr)
            return None
        if isinstance(node, ast.Subscript):
            base, key = self.role_of(node.value, env), _const_str(node.slice)
            return self.keyed(base, key)
        if isinstance(node, ast.Call):
            return self.role_of_call(node, env)
        return None

    def keyed(self, base: Role | None, key: str | None) -> Role | None:
        """``ns["_resources"]``, ``kwargs["resources"]``, ``getattr(self, "resources")``."""
        if key is None:
            return None
        if base in (Role.NS, Role.GEN) and key in RESOURCE_ATTRIBUTES:
            return Role.RES
        if base is Role.KW and key == "resources":
            return Role.RES
        if base in (Role.GEN, Role.HOLDER, Role.NS):
            return self.fields.get(key)
        return None

    def role_of_call(self, node: ast.Call, env: dict[str, Role]) -> Role | None:
        func, args = node.func, node.args
        if isinstance(func, ast.Name):
            zero_or_two = not args or (len(args) == 2 and self.role_of(args[1], env) is Role.GEN)
            if func.id == "super" and self.method_self is not None and func.id not in env and zero_or_two:
                return Role.GEN
            if func.id == "getattr" and len(args) >= 2:
                return self.keyed(self.role_of(args[0], env), _const_str(args[1]))
            if func.id == "vars" and len(args) == 1 and self.role_of(args[0], env) is Role.GEN:
                return Role.NS
            return None
        if isinstance(func, ast.Attribute):
            if func.attr == "__getattribute__":  # object.__getattribute__(self, "x") / self.__getattribute__("x")
                if isinstance(func.value, ast.Name) and func.value.id == "object" and len(args) == 2:
                    return self.keyed(self.role_of(args[0], env), _const_str(args[1]))
                if len(args) == 1:
                    return self.keyed(self.role_of(func.value, env), _const_str(args[0]))
            if func.attr in ("get", "pop", "setdefault") and args:
                base = self.role_of(func.value, env)
                if base in (Role.NS, Role.KW):
                    return self.keyed(base, _const_str(args[0]))
        return None

    # -- what is done with it --
    def at(self, node: ast.AST) -> tuple[int, int]:
        return getattr(node, "lineno", self.fn.lineno), getattr(node, "col_offset", 0) + 1

    def dynamic(self, node: ast.AST, what: str) -> None:
        line, col = self.at(node)
        self.summary.dynamic.append(Dynamic(line, col, what))

    def consumed(self, node: ast.AST, parent: ast.AST | None, env: dict[str, Role]) -> bool:
        """Whether ``parent`` turns ``node`` into another role (``self`` in ``self.resources``)."""
        if parent is None or self.role_of(parent, env) is None:
            return False
        if isinstance(parent, ast.Attribute | ast.Subscript):
            return parent.value is node
        if isinstance(parent, ast.Call):
            return node in parent.args[:1] or (isinstance(parent.func, ast.Attribute) and parent.func.value is node)
        return False

    def classify(self, node: ast.AST, role: Role, env: dict[str, Role]) -> None:
        parent = self.parents.get(node)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return
        if isinstance(parent, ast.Attribute) and isinstance(self.parents.get(parent), ast.Call):
            call = self.parents[parent]
            assert isinstance(call, ast.Call)
            if call.func is parent and self.consumed(parent, call, env):  # self.__getattribute__("x")
                return
        if self.consumed(node, parent, env):
            return
        value, targets = assignment_parts(parent)
        if value is node and targets:
            if all(isinstance(t, ast.Name) for t in targets):
                return  # an alias: its uses are read
            if role in (Role.GEN, Role.RES) and all(self.stores_into(t, env) for t in targets):
                for t in targets:
                    assert isinstance(t, ast.Attribute)
                    owner = self.role_of(t.value, env)
                    assert owner is not None
                    self.summary.stores[f"{owner.value}:{t.attr}"] = role
                return
        if role is Role.RES:
            self.classify_resources(node, parent, env)
        elif role in (Role.GEN, Role.HOLDER):
            self.classify_generator(node, parent, env)
        else:
            self.classify_namespace(node, role, parent, env)

    def stores_into(self, target: ast.AST, env: dict[str, Role]) -> bool:
        return isinstance(target, ast.Attribute) and self.role_of(target.value, env) in (Role.GEN, Role.HOLDER)

    def classify_resources(self, node: ast.AST, parent: ast.AST | None, env: dict[str, Role]) -> None:
        line, col = self.at(node)
        text = ast.unparse(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr.startswith("_"):
                self.dynamic(node, f"{text}.{parent.attr} reaches into genwire's internals, not a slot")
            else:
                self.use(parent.attr, parent, f"{text}.{parent.attr}")
            return
        if isinstance(parent, ast.Subscript) and parent.value is node:
            key = _const_str(parent.slice)
            if key is not None:
                self.use(key, parent, f"{text}[{key!r}]")
            else:
                self.dynamic(node, f"{text}[{ast.unparse(parent.slice)}]: a slot chosen at run time")
            return
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            i = parent.comparators.index(node)
            left = parent.left if i == 0 else parent.comparators[i - 1]
            if isinstance(parent.ops[i], ast.In | ast.NotIn):
                key = _const_str(left)
                if key is not None:
                    self.summary.uses.append(Use(key, line, col, f"{key!r} in {text}"))
                else:
                    self.dynamic(node, f"{ast.unparse(left)} in {text}: a slot chosen at run time")
                return
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("getattr", "hasattr")
            and parent.args
            and parent.args[0] is node
        ):
            key = _const_str(parent.args[1]) if len(parent.args) > 1 else None
            if key is not None:
                self.use(key, parent, f"{parent.func.id}({text}, {key!r})")
            else:
                self.dynamic(node, f"{ast.unparse(parent)}: a slot chosen at run time")
            return
        if self.handed_to_base_init(node, parent) or self.handed_to_call(node, parent, env):
            return
        if _tested(node, parent):
            return  # `if self.resources`, `x is not None`: nothing reaches a slot
        self.dynamic(node, f"{text} is handed on as a whole ({_context(parent)})")

    def classify_generator(self, node: ast.AST, parent: ast.AST | None, env: dict[str, Role]) -> None:
        if isinstance(node, ast.Call) and isinstance(parent, ast.Attribute):  # super().generate(rows)
            call = self.parents.get(parent)
            if isinstance(call, ast.Call) and call.func is parent and not self.record_call(call, env):
                self.dynamic(node, f"{ast.unparse(call)}: the check cannot follow this call")
            return
        if isinstance(parent, ast.Call | ast.keyword | ast.Starred):
            call = self.call_of(node, parent)
            if call is not None and node is not call.func:
                builtin = call.func.id if isinstance(call.func, ast.Name) and call.func.id not in env else None
                if builtin in HARMLESS_CALLS:
                    return
                if builtin in ATTRIBUTE_CALLS and call.args[:1] == [node]:
                    if len(call.args) < 2 or _const_str(call.args[1]) is None:
                        self.dynamic(
                            node, f"{ast.unparse(call)}: an attribute chosen at run time (it may be the resources)"
                        )
                    return  # a literal name: another attribute (the resources' own names are read above)
                if self.handed_to_base_init(node, parent) or self.handed_to_call(node, parent, env):
                    return
                self.dynamic(node, f"{ast.unparse(node)}, and its resources with it, is handed on ({_context(parent)})")
            return
        if isinstance(parent, ast.Return | ast.Yield | ast.YieldFrom | ast.Lambda):
            if not (isinstance(parent, ast.Return) and self.method_self is not None and node is parent.value):
                self.dynamic(node, f"{ast.unparse(node)}, and its resources with it, is handed on (returned)")
            return
        value, _ = assignment_parts(parent)
        if value is node or isinstance(parent, ast.List | ast.Tuple | ast.Set | ast.Dict):
            self.dynamic(node, f"{ast.unparse(node)}, and its resources with it, is handed on (stored)")

    def classify_namespace(self, node: ast.AST, role: Role, parent: ast.AST | None, env: dict[str, Role]) -> None:
        what = "the generator's attributes" if role is Role.NS else "__init__'s keyword arguments"
        if isinstance(parent, ast.Subscript) and parent.value is node and _const_str(parent.slice) is not None:
            return  # another literal key: not the resources
        if isinstance(parent, ast.Attribute) and parent.value is node:
            call = self.parents.get(parent)
            literal = isinstance(call, ast.Call) and bool(call.args) and _const_str(call.args[0]) is not None
            if parent.attr in ("get", "pop", "setdefault") and literal:
                return
        if role is Role.KW and self.handed_to_base_init(node, parent):
            return
        spread = role is Role.KW and isinstance(parent, ast.keyword) and parent.arg is None
        if spread and self.handed_to_call(node, parent, env):
            return
        self.dynamic(node, f"{ast.unparse(node)}: {what}, which hold the resources, read where the check cannot follow")

    def call_of(self, node: ast.AST, parent: ast.AST | None) -> ast.Call | None:
        call = self.parents.get(parent) if isinstance(parent, ast.keyword | ast.Starred) else parent
        return call if isinstance(call, ast.Call) else None

    def handed_to_base_init(self, node: ast.AST, parent: ast.AST | None) -> bool:
        """``super().__init__(..., resources=resources)``: the one expected hand-over."""
        call = self.call_of(node, parent)
        if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr != "__init__":
            return False
        if not (isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name)):
            return False
        if call.func.value.func.id != "super":
            return False
        return (isinstance(parent, ast.keyword) and parent.arg in ("resources", None)) or node in call.args

    def handed_to_call(self, node: ast.AST, parent: ast.AST | None, env: dict[str, Role]) -> bool:
        """Record a call that hands a role on, for ``source_check`` to follow; False when the
        callee or the argument positions cannot be read."""
        call = self.call_of(node, parent)
        if call is None:
            return False
        return self.record_call(call, env)

    def record_call(self, call: ast.Call, env: dict[str, Role]) -> bool:
        callee = self.callee(call.func, env)
        if callee is None:
            return False
        args: list[tuple[int | str, Role]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                if any(self.role_of(a, env) for a in call.args[i:]):
                    return False  # positions unknown
                break
            role = self.role_of(arg, env)
            if role is not None:
                args.append((i, role))
        for kw in call.keywords:
            role = self.role_of(kw.value, env)
            if role is None:
                continue
            if kw.arg is not None:
                args.append((kw.arg, role))
            elif role is Role.KW:
                args.append(("resources", Role.RES))
            else:
                return False
        if call not in self.handed:
            self.handed.add(call)
            line, col = self.at(call)
            text = ast.unparse(call)
            self.summary.calls.append(Call(line, col, text if len(text) <= 80 else text[:77] + "...", callee, args))
        return True

    def callee(self, func: ast.AST, env: dict[str, Role]) -> list[str] | None:
        if isinstance(func, ast.Name):
            if func.id in env:
                return None
            if func.id in self.local_defs:
                return ["local", self.local_defs[func.id]]
            return ["global", func.id]
        if not isinstance(func, ast.Attribute):
            return None
        base = func.value
        role = self.role_of(base, env)
        if role in (Role.GEN, Role.HOLDER):
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                return ["super", func.attr]
            return ["self" if role is Role.GEN else "holder", func.attr]
        if (  # type(self).helper / self.__class__.helper
            isinstance(base, ast.Call)
            and isinstance(base.func, ast.Name)
            and base.func.id == "type"
            and len(base.args) == 1
            and self.role_of(base.args[0], env) in (Role.GEN, Role.HOLDER)
        ) or (
            isinstance(base, ast.Attribute)
            and base.attr == "__class__"
            and self.role_of(base.value, env) in (Role.GEN, Role.HOLDER)
        ):
            return ["self", func.attr]  # (a helper's type(self) is rare: resolved on the generator)
        parts = [func.attr]
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id not in env:
            parts.append(base.id)
            return ["global", ".".join(reversed(parts))]
        return None

    def use(self, slot: str, expr: ast.AST, how: str) -> None:
        line, col = self.at(expr)
        found = Use(slot, line, col, how)
        self.summary.uses.append(found)
        kind = _kind_of_use(expr, self.parents)
        if kind is not None:
            found.kinds.append(kind.value)
        value, targets = assignment_parts(self.parents.get(expr))
        if value is expr:  # model = self.resources.model: its later uses say the kind
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            attrs = {t.attr for t in targets if isinstance(t, ast.Attribute)}
            for n in ast.walk(self.fn):
                if (isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)) or (
                    isinstance(n, ast.Attribute) and n.attr in attrs and isinstance(n.ctx, ast.Load)
                ):
                    later = _kind_of_use(n, self.parents)
                    if later is not None:
                        found.kinds.append(later.value)
            for attr in attrs:  # self._model = self.resources.model in __init__, used elsewhere
                self.summary.handles[attr] = slot


def _kind_of_use(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ResourceKind | None:
    """The kind the expression ``node`` (a slot's handle) is used as, if the use says."""
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in KIND_BY_METHOD and isinstance(parents.get(parent), ast.Call):
            return KIND_BY_METHOD[parent.attr]
        return KIND_BY_ATTRIBUTE.get(parent.attr)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and node in parent.args:
        return KIND_BY_CALLER.get(parent.func.id)
    return None


def _tested(node: ast.AST, parent: ast.AST | None) -> bool:
    """Whether ``node`` is only tested for truth or identity."""
    if isinstance(parent, ast.Compare):
        return all(isinstance(op, ast.Is | ast.IsNot) for op in parent.ops)
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert):
        return parent.test is node
    return isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)  # (`a or b` passes a value on)


def _context(parent: ast.AST | None) -> str:
    if isinstance(parent, ast.Call | ast.keyword | ast.Starred):
        return "passed to a function the check cannot follow"
    if isinstance(parent, ast.Assign | ast.AnnAssign):
        return "stored"
    if isinstance(parent, ast.Return | ast.Lambda):
        return "returned"
    if isinstance(parent, ast.For | ast.AsyncFor | ast.comprehension):
        return "iterated"
    return f"used in {type(parent).__name__}" if parent is not None else "used"


# Words without which no expression in a function's text can reach the resources (besides
# its role parameters and the entry's fields): reading its tree is skipped (most methods).
_REACHING_WORDS = ("resources", "__dict__", "vars", "getattr", "__getattribute__", "super", "__class__")


def may_matter(text: str, entry: Entry) -> bool:
    """Whether ``text`` (a function's source) can do anything with the roles of ``entry``:
    a cheap test on the text before the tree is walked. A GEN or HOLDER parameter only
    followed by ``.`` reaches nothing but attributes, which the words and fields cover;
    any other use of it (passed, stored, returned) or of another role's name is read. A
    method using a handle the kind tables know (``.embed(``) is read for its kind hint."""
    if any(word in text for word in _REACHING_WORDS) or any(name in text for name, _ in entry.fields):
        return True
    holds_generator = any(role in (Role.GEN, Role.HOLDER) for _, role in entry.params)
    if holds_generator and any(f".{word}" in text for word in (*KIND_BY_METHOD, *KIND_BY_ATTRIBUTE)):
        return True  # self._model.embed(...): a kind hint for a stored handle
    for name, role in entry.params:
        tail = r"(?!\s*\.)" if role in (Role.GEN, Role.HOLDER) else ""
        if re.search(rf"(?<![\w.]){re.escape(name)}\b{tail}", text):
            return True
    return False


def read_function(fn: FunctionNode, entry: Entry) -> Summary:
    """What ``fn`` (and what is nested in it) does with the roles ``entry`` gives its parameters."""
    params = set(param_names(fn))
    return _Reader(fn, entry).run({n: r for n, r in entry.params if n in params})


