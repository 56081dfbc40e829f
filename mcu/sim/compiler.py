"""Board code compiled as MicroPython runs it: the source parsed by CPython, then rewritten where CPython compiles
differently (`.value`/`.errno` loads, `except ... as e` wording, the `@micropython.native/viper/bytecode` emitters,
the REPL printing each top-level expression's value). The rewritten code calls the hooks named here, which the
board's builtins (mcu.sim.board_builtins) bind.
"""

from __future__ import annotations

import ast
import types

from mcu.sim.exceptions import EXCEPTION_ALIASES

REPL_PRINT = "_kbench_repl_print"
EXCEPTION_ATTR = "_kbench_exception_attr"
CAUGHT = "_kbench_caught"
MICROPYTHON_EMITTERS = ("native", "viper", "bytecode")  # decorators the twin compiles as plain bytecode


def compile_board(source: bytes | str, filename: str, interactive: bool = False,
                  mode: str = "exec") -> types.CodeType:
    """`source` compiled as board code: `interactive` prints the value of each top-level expression as the REPL
    does, and so does mode "single" (compile(..., "single")); NUL bytes are a SyntaxError."""
    try:
        tree = ast.parse(source, filename, mode)
    except ValueError as exc:  # NUL bytes in the source
        raise SyntaxError(str(exc), (filename, 1, 0, "")) from None
    if interactive and mode == "exec":
        for i, node in enumerate(tree.body):
            if isinstance(node, ast.Expr):  # the REPL prints the value of each top-level expression
                tree.body[i] = _printed(node)
    if mode == "single":  # compile(..., "single"): each expression statement's value printed, as the REPL does
        tree, mode = ast.Module(_SingleInput().visit(tree).body, []), "exec"
    tree = _BoardSemantics(filename).visit(tree)
    return compile(ast.fix_missing_locations(tree), filename, mode, dont_inherit=True)


def _printed(node: ast.Expr) -> ast.Expr:
    """The expression statement `node` with its value printed by the REPL (never through host sys.displayhook)."""
    return ast.copy_location(ast.Expr(ast.Call(ast.Name(REPL_PRINT, ast.Load()), [node.value], [])), node)


class _SingleInput(ast.NodeTransformer):
    """Expression statements of a "single" input printed, those inside functions and classes left alone."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        return _printed(node)

    def _scope(self, node: ast.AST) -> ast.AST:
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _scope


class _BoardSemantics(ast.NodeTransformer):
    """What CPython compiles differently from MicroPython, rewritten in the tree: `x.value` and `x.errno` loads
    become `_kbench_exception_attr(x, 'value')` (stores are left alone); each `except ... as e:` body starts with
    `_kbench_caught(e)`; the compile-time decorators `@micropython.native`, `.viper` and `.bytecode` are dropped (code
    runs as bytecode), and the inline assemblers are a SyntaxError, as in a firmware built without them."""

    def __init__(self, filename: str):
        self.filename = filename

    def _decorators(self, node):
        kept = []
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name) \
                    and decorator.value.id == "micropython":
                if decorator.attr in MICROPYTHON_EMITTERS:
                    continue
                raise SyntaxError("invalid micropython decorator",
                                  (self.filename, decorator.lineno, decorator.col_offset + 1, None))
            kept.append(decorator)
        node.decorator_list = kept
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _decorators

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in EXCEPTION_ALIASES and isinstance(node.ctx, ast.Load):
            call = ast.Call(ast.Name(EXCEPTION_ATTR, ast.Load()), [node.value, ast.Constant(node.attr)], [])
            return ast.copy_location(call, node)
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        self.generic_visit(node)
        if node.name:
            call = ast.Call(ast.Name(CAUGHT, ast.Load()), [ast.Name(node.name, ast.Load())], [])
            node.body.insert(0, ast.copy_location(ast.Expr(call), node.body[0]))
        return node
