"""The package's layout: folders by layer, imports point one way, sit at the top, and the command line starts light.

The layers are the package's folders in the order its docstring lists them (``compose_lens/__init__.py``:
the one description of the architecture). A module may import from its own folder or an earlier one,
never a later one, and no two modules import each other through any path. The test reads the source
with ``ast`` (nothing is imported), so a cycle hidden in a function body is found too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "compose_lens"


def described_layers() -> list[str]:
    """The folders the package docstring lists, in order (lines ``    name/   what it holds``)."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    return re.findall(r"^    (\w+)/ ", doc, re.M)


LAYERS = {name: i for i, name in enumerate(described_layers())}


def test_the_package_is_the_folders_its_docstring_describes():
    """At most ten top-level parts, each a folder named in the description, each named one there."""
    parts = sorted(p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
                   if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists())
    assert parts == sorted(LAYERS), f"the package holds {parts}; its docstring describes {sorted(LAYERS)}"
    assert len(parts) <= 10


# Imports allowed inside functions, with the reason.
LAZY_ALLOWED = {
    "cli": "start-up time: `compose-lens --help` must not import torch",
    "sweep": "ray and submitit (compose_lens.sweep.slurm) are optional dependencies",
    "registry": "start-up time: the command line builds its findings table and the registered analyses' "
                "commands from these declarations before torch is imported; their functions import the analyses "
                "(the registry's own modules and each folder's __init__.py: not a folder's numbers or figures)",
    "model.tl": "start-up time: the tokenizer imports transformers (~2 s with TransformerLens); "
                "`evaluate` runs without either",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    """The package's modules, parsed; not an analysis folder's tests (``test_*.py``, collected by pytest beside
    the code they test: they drive the command line and the report, as the tests under tests/ do)."""
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))
            if not p.name.startswith("test_")}


def imported(name: str, tree: ast.Module, inside_functions: bool | None = None) -> set[str]:
    """compose_lens modules that ``name`` imports (anywhere, or only inside / outside functions)."""
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lazy |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    package = name if (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists() else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if inside_functions is not None and (id(node) in lazy) != inside_functions:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        found |= {t for t in targets if t.startswith("compose_lens")}
    return found


def resolve(target: str, known: set[str]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def graph() -> dict[str, set[str]]:
    trees = modules()
    known = set(trees)
    edges = {}
    for name, tree in trees.items():
        targets = {resolve(t, known) for t in imported(name, tree)} - {None, name}
        edges[name] = {t for t in targets if not name.startswith(t + ".")}  # a package's own __init__
    return edges


def test_every_module_has_a_layer():
    unplaced = [m for m in modules() if m != "compose_lens" and layer(m) is None]
    assert not unplaced, f"give these a layer in LAYERS: {unplaced}"


def test_imports_point_forward_only():
    backward = [f"{a} -> {b}" for a, targets in graph().items() for b in targets
                if a != "compose_lens" and layer(b) is not None and layer(b) > layer(a)]
    assert not backward, "imports pointing back up the flow: " + "; ".join(sorted(backward))


def test_no_import_cycles():
    edges = graph()
    cycles = []
    for start in edges:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not cycles, "import cycles: " + "; ".join(sorted(cycles)[:5])


def test_imports_sit_at_the_top_unless_a_reason_is_stated():
    hidden = []
    for name, tree in modules().items():
        short = name.removeprefix("compose_lens.")
        if any(short == k or short.startswith(k + ".") for k in LAZY_ALLOWED) and not (
                short.startswith("registry.") and short.count(".") > 1):  # a folder's numbers and figures
            continue
        lazy = imported(name, tree, inside_functions=True)
        if lazy:
            hidden.append(f"{name}: {sorted(lazy)}")
    assert not hidden, "imports inside functions: " + "; ".join(hidden)


def test_only_model_tl_imports_transformer_lens():
    """Among the package's modules (:func:`modules`; not a folder's tests, which check numbers against TransformerLens's own)."""
    users = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "transformer_lens" for n in names):
                users.append(name)
    # registry.das.search runs TransformerLens 4.3's own fit_das: the method is TransformerLens's, not ours
    assert set(users) <= {"compose_lens.model.tl", "compose_lens.registry.das.search"}, users
    assert "compose_lens.model.tl" in users


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["evaluate"], ["sweep", "--param"]])
def test_the_command_line_answers_without_torch(argv):
    """--help and argument errors are answered before torch or TransformerLens is imported."""
    probe = ("import sys\nfrom compose_lens.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "heavy = [m for m in ('torch', 'transformer_lens', 'pandas', 'matplotlib') if m in sys.modules]\n"
             "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout[-300:] + out.stderr[-300:]


def test_public_api_names_resolve_lazily():
    probe = ("import sys, compose_lens as cl\nassert 'torch' not in sys.modules\n"
             "missing = [n for n in cl.__all__ if getattr(cl, n, None) is None]\nprint('MISSING', missing)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "MISSING []" in out.stdout, out.stderr[-500:]


def test_a_public_name_stays_itself_after_its_namesake_module_is_imported():
    """``cl.train`` is the function even after ``cl.Trainer`` imported the module compose_lens.training.train (Python's
    import sets the package attribute to the submodule; it read as a module, in any order of use)."""
    probe = ("import types, compose_lens as cl\ncl.Trainer\nimport compose_lens.training.train\n"
             "from compose_lens.training.train import Trainer\nfrom compose_lens import train\n"
             "print('KINDS', type(cl.train).__name__, type(train).__name__, Trainer is cl.Trainer)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "KINDS function function True" in out.stdout, out.stdout[-300:] + out.stderr[-500:]


# Modules whose public functions carry their tensors' shapes (jaxtyping, as TransformerLens's
# patching does): a bare ``torch.Tensor`` in a public signature of these is refused. Grow the list.
SHAPED = ("training.evaluate", "registry.attention.sequences", "analysis.activations", "registry.dla.attribution",
          "analysis.metrics", "model.heads")
_SHAPED_TENSOR = re.compile(r"(Float|Int|Bool)\[torch\.Tensor, '[^']*'\]|dict\[str, torch\.Tensor\]")


def bare_tensor_annotations(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for where, annotation in [*((a.arg, a.annotation) for a in args), ("return", node.returns)]:
            text = ast.unparse(annotation) if annotation is not None else ""
            if "torch.Tensor" in _SHAPED_TENSOR.sub("", text):
                found.append(f"{node.name}({where}: {text})")
    return found


def test_public_functions_of_shaped_modules_name_their_tensor_shapes():
    trees = modules()
    bare = {m: bare_tensor_annotations(trees[f"compose_lens.{m}"]) for m in SHAPED}
    assert not any(bare.values()), f"give these jaxtyping shapes: { {m: b for m, b in bare.items() if b} }"


def test_the_shape_rule_catches_a_bare_tensor():
    tree = ast.parse("def f(tokens: torch.Tensor) -> Float[torch.Tensor, 'batch']: ...\n"
                     "def g(tokens: Int[torch.Tensor, 'batch pos'], params: dict[str, torch.Tensor]) -> None: ...")
    assert bare_tensor_annotations(tree) == ["f(tokens: torch.Tensor)"]


# -- analyses only through the registry --------------------------------------------------------------
# The report's pages and the command line import no analysis module: they reach an analysis through its
# declaration (compose_lens.registry), run by compose_lens.report.context, the machinery that runs a
# declaration over a subject and may import what the analyses share (the located circuit, the operand
# grids), and by compose_lens.report.compare, which runs that machinery over two models.
MACHINERY = {"compose_lens.report.context", "compose_lens.report.compare"}


def analysis_imports(trees: dict[str, ast.Module]) -> list[str]:
    """``A -> B``: a module of report/ or cli/ importing an analysis module ``B``."""
    known = set(trees)
    found = []
    for name, tree in trees.items():
        if name.split(".")[1:2] not in (["report"], ["cli"]) or name in MACHINERY:
            continue
        for target in {resolve(t, known) for t in imported(name, tree)} - {None}:
            if target.startswith("compose_lens.analysis.") or target.count(".") > 2 and target.startswith(
                    "compose_lens.registry."):  # an analysis folder's own module, not its declaration
                found.append(f"{name} -> {target}")
    return sorted(found)


def test_report_and_cli_import_no_analysis():
    bypass = analysis_imports(modules())
    assert not bypass, "declare these in compose_lens.registry and run them through compose_lens.report.context: " + \
        "; ".join(bypass)


def test_the_no_analysis_rule_catches_a_planted_import():
    trees = dict(modules())
    trees["compose_lens.cli.planted"] = ast.parse("def f():\n    from compose_lens.analysis import locate\n")
    trees["compose_lens.report.planted"] = ast.parse("from compose_lens.analysis.fourier import operand_grid\n"
                                                     "from compose_lens.registry import ATTENTION\n"
                                                     "from compose_lens.registry.attention.interactive import view_html\n")
    assert analysis_imports(trees) == ["compose_lens.cli.planted -> compose_lens.analysis.locate",
                                       "compose_lens.report.planted -> compose_lens.analysis.fourier",
                                       "compose_lens.report.planted -> compose_lens.registry.attention.interactive"]


def test_the_registry_imports_nothing_of_the_report():
    """The report reads the registry, never the other way round, even inside a function: the layers say
    so (registry 7, report 8), and a planted lazy import is caught as pointing back up the flow."""
    assert LAYERS["registry"] < LAYERS["report"]
    planted = ast.parse("def section():\n    from compose_lens.report.page import Report\n")
    targets = {resolve(t, set(modules())) for t in imported("compose_lens.registry", planted)}
    assert "compose_lens.report.page" in targets and layer("compose_lens.report.page") > layer("compose_lens.registry")


# -- one forward ----------------------------------------------------------------------------------------
# The model is computed in model/ and chosen by compose_lens.model.forward.Forward, which everything else asks
# (in Site terms). A forward is found by what it does, not by its name: a function or class that makes an
# attention pattern (model.heads' pattern / attend / scores) or writes a head's output into the residual
# stream (heads.write), computes the answer or an MLP from the weights (weights.unembed / mlp_readout /
# mlp_out), runs the bridge (tl.run_with_cache / run_with_hooks / hooks) or picks one of model/'s forwards
# itself (fastpath, lastpos, use_table_forward). These still run one of their own, each for a reason Forward
# does not cover yet (the list only shrinks):
OWN_FORWARD = {
    "compose_lens.registry.circuit.discovery.GraphModel": "the edge graph: every residual term a sender, per-edge "
                                                          "masks with gradients (EAP), each receiver normalising its "
                                                          "own input",
    "compose_lens.registry.gradient.terms.forward": "float64 under autograd, the gradient split into named terms",
}
FORWARD_HOME = ("compose_lens.model.", "compose_lens.model.forward")
_DOES = {"heads": {"pattern", "attend", "scores", "write"},
         "weights": {"unembed", "mlp_readout", "mlp_out", "use_table_forward"},
         "tl": {"run_with_cache", "run_with_hooks", "hooks"}, "fastpath": None, "lastpos": None}


def forward_maths(tree: ast.Module) -> dict[str, list[str]]:
    """{top-level function or class (``<module>`` outside them): what it calls that computes the model}."""
    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if owner == "<module>" and isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else owner
            if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) and child.value.id in _DOES \
                    and (_DOES[child.value.id] is None or child.attr in _DOES[child.value.id]):
                found.setdefault(inner, set()).add(f"{child.value.id}.{child.attr}")
            visit(child, inner)
    visit(tree, "<module>")
    return {owner: sorted(calls) for owner, calls in found.items()}


def own_forwards(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """{``module.owner``: what it computes} for every forward outside model/ and compose_lens.model.forward."""
    return {f"{name}.{owner}": calls for name, tree in trees.items() if not name.startswith(FORWARD_HOME)
            for owner, calls in forward_maths(tree).items()}


def test_the_model_is_computed_through_the_one_forward():
    stray = {name: used for name, used in own_forwards(modules()).items() if name not in OWN_FORWARD}
    assert not stray, f"compute the model through compose_lens.model.forward.Forward (Site terms): {stray}"


def test_the_one_forward_rule_catches_a_planted_forward_and_its_list_only_shrinks():
    trees = dict(modules())
    trees["compose_lens.analysis.planted"] = ast.parse(
        "def f(model, tokens):\n    return tl.run_with_cache(model, tokens)\n"
        "class Graph:\n    def head(self, q, k, v):\n        return heads.attend(q, k, v)[0] @ self.w_o\n"
        "def logits(p, cfg, x):\n    return weights.unembed(p, cfg, x)\n")
    found = own_forwards(trees)
    assert found["compose_lens.analysis.planted.f"] == ["tl.run_with_cache"]
    assert found["compose_lens.analysis.planted.Graph"] == ["heads.attend"]
    assert found["compose_lens.analysis.planted.logits"] == ["weights.unembed"]
    for name in OWN_FORWARD:
        assert name in found, f"{name} no longer runs a forward of its own: take it off OWN_FORWARD"


# One attention forward: the causal mask and the softmax of attention scores live in model/heads.py
# (compose_lens.model.heads); every other forward hands its scores there. These modules call a
# softmax or a triangular mask for something that is not an attention pattern, with the reason.
ATTENTION_HOME = "model.heads"
NOT_ATTENTION = {
    "analysis.metrics": "softmax of the answer logits (the prob metric)",
    "analysis.probes": "tril(-1) keeps the earlier keys of a score table for an argmax; no pattern is made",
    "views.drawing": "np.triu blanks a heatmap's upper triangle",
}
_ATTENTION_CALLS = {"softmax", "triu", "tril"}


def attention_maths(tree: ast.Module) -> list[str]:
    """Calls that make an attention pattern or a causal mask (``softmax``, ``triu``, ``tril``), as
    ``name:line``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _ATTENTION_CALLS:
                found.append(f"{name}:{node.lineno}")
    return found


def test_one_attention_forward():
    trees = modules()
    assert attention_maths(trees[f"compose_lens.{ATTENTION_HOME}"]), "the helper itself makes the patterns"
    stray = {name: calls for name, tree in trees.items()
             if name.removeprefix("compose_lens.") not in (ATTENTION_HOME, *NOT_ATTENTION)
             and (calls := attention_maths(tree))}
    assert not stray, f"build attention patterns and causal masks through compose_lens.model.heads: {stray}"


def test_the_attention_rule_catches_a_hand_written_pattern():
    tree = ast.parse("A = (q @ k.T).masked_fill(torch.ones(n, n).triu(1), -inf).softmax(-1)\n"
                     "B = torch.softmax(s, -1)\nC = x.log_softmax(-1)\n")
    assert sorted(attention_maths(tree)) == ["softmax:1", "softmax:2", "triu:1"]
