"""`mirax-opt`: mlir-opt for mirax. Parses a .mlir file with the mirax dialect loaded,
checks mirax ops (`mirax-verify`), runs mirax and upstream passes, prints the result.

    mirax-opt f.mlir --mirax-simplify --convert-mirax-to-linalg --canonicalize
    mirax-opt f.mlir --pass-pipeline='builtin.module(mirax-simplify, func.func(cse))'
    mirax-opt invalid.mlir -split-input-file -verify-diagnostics

Pass names are looked up in `mirax.lowering.PASSES` first, then among upstream passes.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

from mlir import ir
from mlir.passmanager import PassManager

SPLIT_MARKER = "// -----"


class UsageError(Exception):
    """A bad command line (unknown flag or pass, malformed options)."""


@dataclass
class Options:
    input: str = "-"
    output: str = "-"
    split_input_file: bool = False
    verify_diagnostics: bool = False
    print_ir_after_all: bool = False
    print_debuginfo: bool = False
    print_generic: bool = False
    allow_unregistered: bool = False
    mirax_verify: bool = True
    pipeline: list = field(default_factory=list)  # pipeline elements: "name{opts}" texts


@dataclass
class Diag:
    """One diagnostic: where (file, line, col or None when unknown), severity, text."""
    loc: str
    file: str | None
    line: int | None
    col: int | None
    severity: str
    message: str


# ---- command line ---------------------------------------------------------------------

FLAGS = {
    "split-input-file": "split_input_file",
    "verify-diagnostics": "verify_diagnostics",
    "mlir-print-ir-after-all": "print_ir_after_all",
    "mlir-print-debuginfo": "print_debuginfo",
    "mlir-print-op-generic": "print_generic",
    "allow-unregistered-dialect": "allow_unregistered",
}


def usage() -> str:
    from .lowering import PASSES
    lines = [
        "OVERVIEW: mirax-opt: the mirax (and MLIR) optimizer driver",
        "",
        "USAGE: mirax-opt [options] [input file, '-' for stdin] [--<pass>[=<options>] ...]",
        "",
        "OPTIONS:",
        "  -o <file>                       output file ('-' for stdout)",
        "  --pass-pipeline=<pipeline>      a textual pipeline, e.g. 'builtin.module(mirax-simplify,cse)'",
        "  -p <pipeline>                   same as --pass-pipeline",
        "  --split-input-file              process chunks separated by '// -----' independently",
        "  --verify-diagnostics            check diagnostics against expected-* comments",
        "  --mlir-print-ir-after-all       print the IR after each pass (to stderr)",
        "  --mlir-print-debuginfo          print locations",
        "  --mlir-print-op-generic         print ops in generic form",
        "  --allow-unregistered-dialect    accept ops of unregistered dialects",
        "  --no-mirax-verify               do not check mirax op types after parsing",
        "  -h, --help                      show this help",
        "",
        "mirax passes:",
    ]
    for name, cls in sorted(PASSES.items()):
        lines.append(f"  --{name:<30} {cls.summary}")
        for opt, (default, help_) in getattr(cls, "options", {}).items():
            lines.append(f"      {opt}={default!s:<22} {help_}")
    lines += ["", "Any upstream MLIR pass is accepted too (e.g. --canonicalize, --cse, "
              "--one-shot-bufferize=\"bufferize-function-boundaries\")."]
    return "\n".join(lines) + "\n"


def parse_args(argv) -> Options | None:
    """Options from the command line, or None when --help was asked for."""
    o = Options()
    inputs = []
    it = iter(argv)
    for arg in it:
        if arg in ("-h", "-help", "--help"):
            return None
        if arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name == "o":
            o.output = value if eq else _next(it, arg)
        elif name in ("pass-pipeline", "p"):
            o.pipeline += split_pipeline(value if eq else _next(it, arg))
        elif name in FLAGS:
            setattr(o, FLAGS[name], True)
        elif name == "no-mirax-verify":
            o.mirax_verify = False
        elif not name or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
            raise UsageError(f"unknown command line argument '{arg}'")
        else:
            o.pipeline.append(f"{name}{{{value}}}" if eq else name)
    if len(inputs) > 1:
        raise UsageError(f"too many input files: {' '.join(inputs)}")
    if inputs:
        o.input = inputs[0]
    return o


def _next(it, flag):
    try:
        return next(it)
    except StopIteration:
        raise UsageError(f"missing value after '{flag}'") from None


def split_top_level(text: str) -> list:
    """Split on commas outside (), {}, [] and quotes."""
    parts, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"unbalanced ')' in pass pipeline '{text}'")
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if depth or quote:
        raise UsageError(f"unbalanced brackets in pass pipeline '{text}'")
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def split_pipeline(text: str) -> list:
    """`builtin.module(a, b{x=1}, func.func(c))` -> ['a', 'b{x=1}', 'func.func(c)']."""
    text = text.strip()
    m = re.fullmatch(r"builtin\.module\s*\((.*)\)", text, re.S)
    if m:
        text = m.group(1)
    elif text.startswith("builtin.module"):
        raise UsageError(f"malformed pass pipeline '{text}'")
    elif re.match(r"[\w.]+\s*\(", text) and not re.match(r"(func\.func|gpu\.module|spirv\.module)\s*\(", text):
        raise UsageError(f"the pass pipeline must be anchored on 'builtin.module': '{text}'")
    return split_top_level(text)


def _parse_pass_options(name, text) -> dict:
    opts = {}
    for item in text.split():
        k, eq, v = item.partition("=")
        if not eq:
            opts[k] = True
            continue
        v = v.strip("\"'")
        if v.lower() in ("true", "false"):
            opts[k] = v.lower() == "true"
        else:
            try:
                opts[k] = int(v)
            except ValueError:
                try:
                    opts[k] = float(v)
                except ValueError:
                    opts[k] = v
    return opts


def build_pass_manager(ctx, pipeline, print_ir=False) -> PassManager:
    """A PassManager over builtin.module running `pipeline` (mirax passes first by name)."""
    from .lowering import PASSES
    pm = PassManager("builtin.module", context=ctx)
    if print_ir:
        pm.enable_ir_printing(print_after_all=True)
    for element in pipeline:
        m = re.fullmatch(r"([\w.-]+)\s*(?:\{(.*)\})?", element, re.S)
        if m and m.group(1) in PASSES:
            cls = PASSES[m.group(1)]
            try:
                cls(**_parse_pass_options(m.group(1), m.group(2) or "")).add_to(pm)
            except ValueError as err:
                raise UsageError(str(err)) from None
            continue
        try:
            with ctx:
                pm.add(element)
        except (ValueError, ir.MLIRError, RuntimeError) as err:
            name = m.group(1) if m else element
            detail = " ".join(str(err).split())
            raise UsageError(f"'{name}' is neither a mirax pass nor an upstream MLIR pass "
                             f"(or its options are wrong): {detail}") from None
    return pm


# ---- diagnostics ----------------------------------------------------------------------

_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def make_diag(loc, severity, message, filename, line_offset) -> Diag:
    text = str(loc)
    m = _FILE_LOC.search(text)
    if not m:
        return Diag(text, None, None, None, severity, message)
    f, line, col = m.group(1), int(m.group(2)), int(m.group(3))
    if f == "-":  # the buffer we parsed: name it and count lines from the file's start
        return Diag(text, filename, line + line_offset, col, severity, message)
    return Diag(text, f, line, col, severity, message)


def format_diag(d: Diag) -> str:
    where = f"{d.file}:{d.line}:{d.col}" if d.file is not None else d.loc
    return f"{where}: {d.severity}: {d.message}"


def _severity(s) -> str:
    s = str(s).rsplit(".", 1)[-1].lower()
    return {"error": "error", "warning": "warning", "note": "note", "remark": "remark"}.get(s, s)


class Collector:
    """Gathers diagnostics from the context handler and from exceptions, in order."""

    def __init__(self, filename):
        self.filename = filename
        self.offset = 0
        self.diags: list = []
        self._seen = set()

    def add(self, loc, severity, message, notes=()):
        d = make_diag(loc, severity, message, self.filename, self.offset)
        key = (d.file, d.line, d.col, d.loc, d.severity, d.message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.diags.append(d)
        for n in notes:
            self.add(n.location, "note", n.message)

    def handler(self, diag) -> bool:
        self.add(diag.location, _severity(diag.severity), diag.message, diag.notes)
        return True

    def add_mlir_error(self, err: ir.MLIRError, fallback):
        diags = list(getattr(err, "error_diagnostics", []) or [])
        if not diags:
            self.add("loc(unknown)", "error", f"{fallback}: {err}")
        for d in diags:
            self.add(d.location, _severity(d.severity), d.message, d.notes)


# ---- processing -----------------------------------------------------------------------

def split_chunks(text: str, split: bool) -> list:
    """[(chunk text, line offset of its first line)]."""
    if not split:
        return [(text, 0)]
    chunks, cur, start = [], [], 0
    for i, line in enumerate(text.splitlines(keepends=True)):
        if re.fullmatch(r"//\s*-----+", line.strip()):
            chunks.append(("".join(cur), start))
            cur, start = [], i + 1
            continue
        cur.append(line)
    chunks.append(("".join(cur), start))
    return chunks


def process_chunk(ctx, text, opts: Options, col: Collector):
    """Parse, verify and transform one buffer; the printed result or None on failure."""
    from .lowering.pass_base import PassError
    from .lowering.verify import verify_module
    from .lowering.verify import check_parsable
    bad = check_parsable(text)
    if bad is not None:  # MLIR's parser would abort the process on it
        col.add(f'loc("-":{bad[0]}:{bad[1]})', "error", bad[2])
        return None
    with ctx:
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as err:
            col.add_mlir_error(err, "cannot parse the input")
            return None
        try:
            if opts.mirax_verify:
                verify_module(module)
            pm = build_pass_manager(ctx, opts.pipeline, opts.print_ir_after_all)
            # some pass code builds types without a location of its own
            with ir.Location.unknown():
                pm.run(module.operation)
        except UsageError:
            raise
        except PassError as err:
            if not getattr(err, "emitted", False):
                col.add(err.location, "error", err.message)
            elif not col.diags:
                col.add(err.location, "error", err.message)
            return None
        except ir.MLIRError as err:
            col.add_mlir_error(err, "pass pipeline failed")
            return None
        except Exception as err:  # a bug in a pass: report it like MLIR would, no traceback
            if os.environ.get("MIRAX_OPT_TRACEBACK"):
                raise
            col.add("loc(unknown)", "error", f"internal error: {type(err).__name__}: {err}")
            return None
        if any(d.severity == "error" for d in col.diags):
            return None
        return module.operation.get_asm(enable_debug_info=opts.print_debuginfo,
                                        print_generic_op_form=opts.print_generic)


# ---- -verify-diagnostics --------------------------------------------------------------

_EXPECTED = re.compile(
    r"expected-(error|warning|note|remark)(-re)?\s*(?:@([+-]\d+|above|below|unknown))?\s*\{\{(.*)\}\}\s*$")


@dataclass
class Expected:
    severity: str
    line: int | None  # line in the chunk it applies to, None for @unknown
    at: int  # line of the comment (in the chunk)
    col: int
    text: str
    regex: bool
    matched: bool = False

    def matches(self, message: str) -> bool:
        if not self.regex:
            return self.text in message
        # -re: literal text with {{regex}} pieces, as in MLIR
        parts = re.split(r"\{\{(.*?)\}\}", self.text)
        pattern = "".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts))
        return re.search(pattern, message) is not None


def expected_diagnostics(text: str) -> list:
    lines = text.splitlines()
    out, pending_below, last_code = [], [], None
    for i, line in enumerate(lines, 1):
        m = _EXPECTED.search(line)
        if not m:
            last_code = i
            for e in pending_below:
                e.line = i
            pending_below = []
            continue
        sev, is_re, at, body = m.groups()
        e = Expected(sev, i, i, m.start() + 1, body, bool(is_re))
        if at is None:
            pass
        elif at == "unknown":
            e.line = None
        elif at == "above":
            e.line = last_code if last_code is not None else i
        elif at == "below":
            pending_below.append(e)
        else:
            e.line = i + int(at)
        # a designator line still counts as code for a following plain annotation
        if at is None:
            last_code = i
        out.append(e)
    return out


def verify_chunk(text: str, diags: list, filename: str, offset: int) -> list:
    """Mismatches between the expected-* comments of `text` and `diags`, as messages."""
    expected = expected_diagnostics(text)
    problems = []
    for d in diags:
        local = d.line - offset if d.line is not None and d.file == filename else None
        for e in expected:
            if e.matched or e.severity != d.severity:
                continue
            if (e.line is None and d.file is None and "unknown" in d.loc) or \
                    (e.line is not None and local == e.line):
                if e.matches(d.message):
                    e.matched = True
                    break
        else:
            if d.severity == "note" and not any(e.severity == "note" for e in expected):
                continue  # notes (e.g. "see current operation") matter only when expected
            problems.append(f"{format_diag(d).split(': ', 1)[0]}: error: unexpected {d.severity}: {d.message}")
    for e in expected:
        if not e.matched:
            problems.append(f"{filename}:{e.at + offset}:{e.col}: error: expected {e.severity} "
                            f"\"{e.text}\" was not produced")
    return problems


# ---- driver ---------------------------------------------------------------------------

def _read_input(path):
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as err:
        raise UsageError(f"could not open input file '{path}': {err.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"input file '{path}' is not UTF-8 text") from None


def run(opts: Options) -> int:
    from .runtime.context import new_context
    ctx = new_context()
    ctx.allow_unregistered_dialects = opts.allow_unregistered
    # a pass named wrongly fails before any input is read, as in mlir-opt
    build_pass_manager(ctx, opts.pipeline)
    text, filename = _read_input(opts.input)
    col = Collector(filename)
    ctx.attach_diagnostic_handler(col.handler)
    outputs, failed, problems = [], False, []
    from .array import STATE
    for chunk, offset in split_chunks(text, opts.split_input_file):
        col.offset, col.diags, col._seen = offset, [], set()
        STATE.source = (filename, offset)  # ops the passes create point into the input file
        try:
            result = process_chunk(ctx, chunk, opts, col)
        finally:
            STATE.source = None
        if result is not None:
            outputs.append(result)
        if opts.verify_diagnostics:
            problems += verify_chunk(chunk, col.diags, filename, offset)
        else:
            for d in col.diags:
                print(format_diag(d), file=sys.stderr)
            failed |= result is None
    if opts.verify_diagnostics:
        for p in problems:
            print(p, file=sys.stderr)
        failed = bool(problems)
    out = ("\n" + SPLIT_MARKER + "\n").join(o.rstrip("\n") + "\n" for o in outputs)
    if opts.output == "-":
        sys.stdout.write(out)
    else:
        try:
            with open(opts.output, "w", encoding="utf-8") as f:
                f.write(out)
        except OSError as err:
            raise UsageError(f"could not open output file '{opts.output}': {err.strerror}") from None
    return 1 if failed else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        opts = parse_args(argv)
        if opts is None:
            sys.stdout.write(usage())
            return 0
        return run(opts)
    except UsageError as err:
        print(f"mirax-opt: error: {err}", file=sys.stderr)
        return 2 if "argument" in str(err) else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
