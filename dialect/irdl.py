"""Generate the IRDL definition of the mirax dialect from the primitive declarations.

    python -m mirax.dialect > dialect/mirax.irdl.mlir

Every operand and result gets its own constraint variable: IRDL forces two uses of one
variable to the same type. For the same reason mirax has no variadic operands (IRDL
unifies the types of all values of a variadic operand).
"""
from .core import PRIMITIVES


def _op_text(p):
    lines = [f"  irdl.operation @{p.name} {{"]
    if p.summary:
        lines.append(f"    // {p.summary}")
    names = []
    for i, _ in enumerate(p.operands):
        lines.append(f'    %in{i} = irdl.base "!builtin.tensor"')
        names.append(f"{p.operands[i]}: %in{i}")
    lines.append('    %out = irdl.base "!builtin.tensor"')
    for k, kind in p.attrs.items():
        lines.append(f'    %attr_{k} = irdl.base "{kind.irdl_base}"')
    if names:
        lines.append(f"    irdl.operands({', '.join(names)})")
    lines.append("    irdl.results(result: %out)")
    if p.attrs:
        attrs = ", ".join(f'"{k}" = %attr_{k}' for k in p.attrs)
        lines.append(f"    irdl.attributes {{{attrs}}}")
    lines.append("  }")
    return "\n".join(lines)


def irdl_text() -> str:
    header = ("// The mirax dialect, generated from dialect/*.py by `python -m mirax.dialect`.\n"
              "// Do not edit: test_dialect.py fails when this file is stale.\n")
    body = "\n".join(_op_text(PRIMITIVES[n]) for n in sorted(PRIMITIVES))
    return header + "irdl.dialect @mirax {\n" + body + "\n}\n"

