#!/usr/bin/env python3
"""Checks that every #include in engine/, kernels/, ui/ and app/ respects the layers drawn in
docs/architecture.md: no include points to a higher layer, backends do not include each
other, the app and the ui use only the engine's public headers, the engine never includes
Qt, and ui/core (once it exists) includes neither ui/widgets nor a Qt GUI or Widgets header.

Every file must belong to a layer (the tables below): a new folder or a new public header is
an error until it is placed deliberately. Known violations, being fixed, are listed in
scripts/layer-allowlist.txt ("FILE -> HEADER" per line); the aim is an empty list.

Prints one line per violation, "FILE:LINE includes HEADER: A may not include B (reason)",
then a summary line; exits 1 when there is any violation or unplaced file, else 0.

    scripts/check-layers.py [--root DIR] [--allowlist FILE | --no-allowlist]
"""

import argparse
import glob
import os
import re
import sys

# ---------------------------------------------------------------------------------------------
# The layers. Edit these tables to move a folder or a public header; keep
# docs/architecture.md in step.

# Bottom to top. A layer may include its own files and any layer on a lower level. Layers on
# the same level may not include each other (a sideways include) unless PEERS says so.
LEVELS = [
    ("core", ["core"]),
    ("model and tokenizer", ["model", "tokenizer"]),
    ("backend interface", ["backend"]),
    ("backend implementations", ["cpu", "kv", "cuda_host"]),
    ("architectures", ["arch"]),
    ("runtime", ["runtime"]),
    # The client side of OpenAI-compatible servers: no transport, no Qt, no engine (the CLI
    # and the app share it).
    ("remote client protocol", ["remote"]),
    ("ui core", ["ui/core"]),
    ("ui widgets", ["ui/widgets"]),
    ("programs", ["app/cli", "app/gui"]),
]

# Same-level pairs that may include each other, and why.
PEERS = {
    ("model", "tokenizer"): "a Model carries its tokenizer",
    ("tokenizer", "model"): "the tokenizer is read from the model file's metadata",
    ("cpu", "kv"): "kv/ holds the CPU backend's cache layouts",
    ("kv", "cpu"): "kv/ holds the CPU backend's cache layouts",
}

# Pairs the levels would allow but the design does not.
FORBIDDEN = {
    ("arch", "cpu"): "an architecture is written over the backend interface, not one backend",
    ("arch", "kv"): "an architecture is written over the backend interface, not one backend",
    ("arch", "cuda_host"): "an architecture is written over the backend interface, not one backend",
}

# The CUDA plugin (engine/src/cuda/ and kernels/) is a library of its own, outside the levels:
# what each of its layers may include, and which engine layers may include it.
PLUGIN_MAY_INCLUDE = {
    "cuda": {"cuda", "plugin_abi", "kernels", "core"},
    "kernels": {"kernels", "plugin_abi", "core"},
    "plugin_abi": {"plugin_abi", "core"},
}
PLUGIN_INCLUDED_BY = {
    "cuda": set(),
    "kernels": {"cuda"},
    # The C interface between the engine and the plugin: the CUDA host code calls it, the
    # runtime opens the plugin and probes it.
    "plugin_abi": {"cuda", "kernels", "cuda_host", "runtime"},
}

# Files to layers by folder (the longest matching prefix wins).
FOLDERS = {
    "engine/src/core/": "core",
    "engine/src/model/": "model",
    "engine/src/tokenizer/": "tokenizer",
    "engine/src/template/": "tokenizer",
    "engine/src/backend/": "backend",
    "engine/src/cpu/": "cpu",
    "engine/src/kv/": "kv",
    "engine/src/cuda_host/": "cuda_host",
    "engine/src/arch/": "arch",
    "engine/src/runtime/": "runtime",
    "engine/src/cuda/": "cuda",
    "kernels/": "kernels",
    "ui/core/": "ui/core",
    "ui/widgets/": "ui/widgets",
    "app/cli/": "app/cli",
    "app/gui/": "app/gui",
    "remote/": "remote",
}

# Single files, ahead of FOLDERS; every public header is placed here, one by one.
FILES = {
    "engine/src/cuda/plugin_abi.h": "plugin_abi",
    "engine/include/longscope/types.h": "core",
    "engine/include/longscope/errors.h": "core",
    "engine/include/longscope/hparams.h": "core",
    "engine/include/longscope/mapped_file.h": "core",
    "engine/include/longscope/cpu_options.h": "core",
    "engine/include/longscope/model.h": "model",
    "engine/include/longscope/gguf.h": "model",
    # Re-encoding a model file runs the CPU's block quantizers on its thread pool.
    "engine/include/longscope/quantize.h": "runtime",
    "engine/include/longscope/tokenizer.h": "tokenizer",
    "engine/include/longscope/chat.h": "tokenizer",
    "engine/include/longscope/prompt_fit.h": "tokenizer",
    "engine/include/longscope/engine.h": "runtime",
    "engine/include/longscope/session.h": "runtime",
    "engine/include/longscope/generator.h": "runtime",
    # The switches every layer reads (KV mode, backend, attention, RoPE): plain values.
    "engine/include/longscope/settings.h": "core",
    "engine/include/longscope/metrics.h": "runtime",
    "engine/include/longscope/sampler.h": "runtime",
    "engine/include/longscope/perplexity.h": "runtime",
    "engine/include/longscope/needle.h": "runtime",
    # A model in words (family, tokenizer, end-of-generation tokens, RoPE scaling in use), for
    # the CLI's info and the app's model header.
    "engine/include/longscope/model_description.h": "runtime",
    # What each backend is and why it can or cannot be used; the CPU's kernels and bandwidth.
    # Declared at the backend level, which cpu/ and cuda_host/ fill in; the runtime probes.
    "engine/include/longscope/backend.h": "backend",
    "engine/include/longscope/hardware.h": "backend",
}

# Where quoted includes are looked for after the including file's own folder, and angle
# includes at all (the include directories the CMake targets set).
INCLUDE_ROOTS = ["engine/include", "engine/src", "kernels", "ui", "ui/core", "ui/widgets", ""]

SCANNED_DIRS = ["engine", "kernels", "ui", "app", "remote"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cu", ".cuh")

# Qt modules and class headers that ui/core may not use (it is QtCore only). Qt's own header
# folders, where installed, add every class of these modules.
QT_GUI_MODULES = {
    "QtGui", "QtWidgets", "QtPrintSupport", "QtSvg", "QtSvgWidgets", "QtOpenGL",
    "QtOpenGLWidgets", "QtCharts", "QtQuick", "QtQml", "QtQuickWidgets",
}
QT_GUI_CLASSES = {
    "QAbstractButton", "QAbstractItemView", "QAction", "QApplication", "QBoxLayout", "QBrush",
    "QButtonGroup", "QCheckBox", "QClipboard", "QCloseEvent", "QColor", "QComboBox",
    "QCompleter", "QCursor", "QDesktopServices", "QDialog", "QDialogButtonBox", "QDockWidget",
    "QDoubleSpinBox", "QDoubleValidator", "QDragEnterEvent", "QDropEvent", "QFileDialog",
    "QFont", "QFontDatabase", "QFontMetrics", "QFormLayout", "QFrame", "QGridLayout",
    "QGroupBox", "QGuiApplication", "QHBoxLayout", "QHeaderView", "QIcon", "QImage",
    "QInputDialog", "QIntValidator", "QKeyEvent", "QKeySequence", "QLabel", "QLayout",
    "QLineEdit", "QListView", "QListWidget", "QMainWindow", "QMenu", "QMenuBar", "QMessageBox",
    "QMouseEvent", "QMovie", "QPaintEvent", "QPainter", "QPalette", "QPen", "QPixmap",
    "QPlainTextEdit", "QPrinter", "QProgressBar", "QProgressDialog", "QPushButton",
    "QRadioButton", "QResizeEvent", "QScreen", "QScrollArea", "QScrollBar", "QShortcut",
    "QShowEvent", "QSizePolicy", "QSlider", "QSpacerItem", "QSpinBox", "QSplitter",
    "QStackedWidget", "QStandardItem", "QStandardItemModel", "QStatusBar", "QStyle",
    "QStyledItemDelegate", "QSvgRenderer", "QSyntaxHighlighter", "QSystemTrayIcon",
    "QTabWidget", "QTableView", "QTableWidget", "QTextBlock", "QTextBrowser",
    "QTextCharFormat", "QTextCursor", "QTextDocument", "QTextEdit", "QTextFrame", "QTextOption",
    "QToolBar", "QToolButton", "QTreeView", "QVBoxLayout", "QValidator", "QWheelEvent",
    "QWidget", "QWindow",
}
QT_GUI_HEADERS = {"qcustomplot.h"}
QT_INCLUDE_DIRS = ["/usr/include/qt6", "/usr/include/*/qt6", "/usr/local/include/qt6"]

# ---------------------------------------------------------------------------------------------

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# Comments, and the literals that may hold comment markers, in one pass.
LEXEME_RE = re.compile(
    r'//[^\n]*'
    r'|/\*.*?\*/'
    r'|R"([^()\\ \n]{0,16})\(.*?\)\1"'
    r'|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'",
    re.S)
IF0_RE = re.compile(r'^[ \t]*#[ \t]*if[ \t]+\(?0\b', re.M)
CONDITIONAL_RE = re.compile(r'^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$')
QT_NAME_RE = re.compile(r'^(Qt\w*(/|$)|Q[A-Z]\w*$|q[a-z0-9_]+\.h$)')
NOT_QT = {"quadmath.h"}


def strip_comments(text):
    """The text with its comments and raw strings blanked (newlines kept, so line numbers
    stay right); other literals stay, an include's "path" among them."""
    def blank(m):
        s = m.group(0)
        if s.startswith(("//", "/*", "R")):
            return re.sub(r'[^\n]', ' ', s)
        return s
    return LEXEME_RE.sub(blank, text)


def dead_lines(text):
    """Line numbers inside `#if 0` blocks, which the compiler never sees."""
    dead = set()
    depth = 0  # > 0: inside an `#if 0`, counting nested conditionals
    for number, line in enumerate(text.split("\n"), 1):
        m = CONDITIONAL_RE.match(line)
        if depth:
            dead.add(number)
            if m:
                word = m.group(1)
                if word in ("if", "ifdef", "ifndef"):
                    depth += 1
                elif word == "endif":
                    depth -= 1
                elif depth == 1 and word in ("else", "elif"):
                    depth = 0
        elif m and m.group(1) == "if" and m.group(2).strip() in ("0", "(0)"):
            depth = 1
    return dead


def includes(path):
    """(line, delimiter, header) for every include the compiler would see."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    dead = dead_lines(text) if IF0_RE.search(text) else ()
    for m in INCLUDE_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if line not in dead:
            yield line, m.group(1), m.group(2).strip()


def scan(root):
    files = []
    for top in SCANNED_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    files.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return files


def layer_of(rel):
    if rel in FILES:
        return FILES[rel]
    best = None
    for prefix, layer in FOLDERS.items():
        if rel.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return best[1] if best else None


def resolve(rel, delim, header, known):
    """The repository path an include names, or None for a header outside the tree."""
    candidates = []
    if delim == '"':
        candidates.append(os.path.dirname(rel))
    candidates.extend(INCLUDE_ROOTS)
    for base in candidates:
        path = os.path.normpath(os.path.join(base, header)).replace(os.sep, "/")
        if path in known:
            return path
    return None


def is_qt(header):
    return header not in NOT_QT and bool(QT_NAME_RE.match(header))


class QtGuiHeaders:
    """Whether a Qt header belongs to a GUI or Widgets module (read once, when needed)."""

    def __init__(self):
        self.classes = None

    def __contains__(self, header):
        module = header.split("/")[0]
        if "/" in header or module in QT_GUI_MODULES:
            return module in QT_GUI_MODULES
        if header in QT_GUI_HEADERS or header in QT_GUI_CLASSES:
            return True
        if self.classes is None:
            self.classes = set()
            for pattern in QT_INCLUDE_DIRS:
                for qt in glob.glob(pattern):
                    for module in QT_GUI_MODULES:
                        try:
                            self.classes.update(os.listdir(os.path.join(qt, module)))
                        except OSError:
                            pass
        return header in self.classes


def level_of(layer):
    for index, (name, layers) in enumerate(LEVELS):
        if layer in layers:
            return index, name
    return None, None


def engine_side(rel):
    return rel.startswith("engine/") or rel.startswith("kernels/")


def judge(rel, src, header, target, tgt, qt_gui):
    """(LAYER_B, reason) when this include breaks a rule, else None."""
    if engine_side(rel) and is_qt(header):
        return "Qt", "the engine is plain C++20 and never includes Qt"
    if src == "ui/core" and is_qt(header) and header in qt_gui:
        return "Qt GUI/Widgets", "ui/core is QtCore only, tested without widgets"
    if src == "remote" and is_qt(header):
        return "Qt", "the client protocol is shared with the CLI, which links no Qt"
    if target is None or tgt is None or src == tgt:
        return None
    if src == "remote":
        return tgt, "the client protocol stands alone: it includes neither the engine nor the ui"
    if not engine_side(rel) and target.startswith("engine/src/"):
        return tgt, "the app and the ui use only the engine's public headers, engine/include/longscope/"
    if not engine_side(rel) and engine_side(target) and tgt in PLUGIN_INCLUDED_BY:
        return tgt, "the CUDA plugin is a library of its own"
    if src in PLUGIN_MAY_INCLUDE:
        if tgt not in PLUGIN_MAY_INCLUDE[src]:
            allowed = ", ".join(sorted(PLUGIN_MAY_INCLUDE[src] - {src}))
            return tgt, f"the CUDA plugin is a library of its own; {src} may include only its own files and {allowed}"
        return None
    if tgt in PLUGIN_INCLUDED_BY:
        if src not in PLUGIN_INCLUDED_BY[tgt]:
            return tgt, "the CUDA plugin is a library of its own"
        return None
    if (src, tgt) in FORBIDDEN:
        return tgt, FORBIDDEN[(src, tgt)]
    src_level, _ = level_of(src)
    tgt_level, tgt_level_name = level_of(tgt)
    if tgt_level > src_level:
        return tgt, f"upward: {tgt} is above {src}"
    if tgt_level == src_level and (src, tgt) not in PEERS:
        return tgt, f"sideways: {tgt_level_name} do not include each other"
    return None


def read_allowlist(path):
    entries = {}
    if not path or not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "->" not in line:
                raise SystemExit(f"{path}:{number}: expected 'FILE -> HEADER'")
            file, header = (part.strip() for part in line.split("->", 1))
            entries[(file, header.strip('<>"'))] = number
    return entries


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(here),
                        help="the repository to check (default: the one holding this script)")
    parser.add_argument("--allowlist", help="known violations (default: ROOT/scripts/layer-allowlist.txt)")
    parser.add_argument("--no-allowlist", action="store_true", help="report the known violations too")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isdir(os.path.join(root, "engine")):
        parser.error(f"{root}: no engine/ folder here")
    allowlist_path = None if args.no_allowlist else (
        args.allowlist or os.path.join(root, "scripts", "layer-allowlist.txt"))
    allowed = read_allowlist(allowlist_path)

    files = scan(root)
    known = set(files)
    qt_gui = QtGuiHeaders()
    problems = []
    used = set()
    n_includes = 0
    n_allowed = 0
    for rel in files:
        src = layer_of(rel)
        if src is None:
            problems.append(f"{rel}: not placed in any layer (add its folder, or the public "
                            f"header itself, to the tables at the top of scripts/check-layers.py)")
            continue
        for line, delim, header in includes(os.path.join(root, rel)):
            n_includes += 1
            target = resolve(rel, delim, header, known)
            tgt = layer_of(target) if target else None
            verdict = judge(rel, src, header, target, tgt, qt_gui)
            if verdict is None:
                continue
            key = next((k for k in ((rel, header), (rel, target)) if k in allowed), None)
            if key:
                used.add(key)
                n_allowed += 1
                continue
            other, reason = verdict
            problems.append(f"{rel}:{line} includes {header}: {src} may not include {other} ({reason})")

    for line in problems:
        print(line)
    for key, number in sorted(allowed.items(), key=lambda item: item[1]):
        if key not in used:
            print(f"note: {os.path.relpath(allowlist_path, root)}:{number}: {key[0]} -> {key[1]} "
                  f"no longer happens; remove the line")
    print(f"check-layers: {len(files)} files, {n_includes} includes, {len(problems)} "
          f"problem{'s' if len(problems) != 1 else ''}, {n_allowed} allowlisted")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
