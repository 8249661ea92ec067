#!/usr/bin/env python3
"""Proves scripts/check-layers.py can fail: on copies of the source tree, each case plants an
include that breaks (or keeps) a layer rule and checks the verdict, the exit status and that
the offending file and line are named. The unmodified copy must pass.

    tests/layers/test_check_layers.py [--root DIR]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIRS = ["engine", "kernels", "ui", "app", "remote"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cu", ".cuh")
SCRIPT_FILES = ["scripts/check-layers.py", "scripts/layer-allowlist.txt"]


def copy_tree(root, dest):
    """The sources the check reads, and the check itself, into dest."""
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.endswith(EXTENSIONS):
                    src = os.path.join(dirpath, name)
                    dst = os.path.join(dest, os.path.relpath(src, root))
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    shutil.copyfile(src, dst)
    for rel in SCRIPT_FILES:
        if os.path.exists(os.path.join(root, rel)):
            os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
            shutil.copyfile(os.path.join(root, rel), os.path.join(dest, rel))


def insert_after_first_line(tree, rel, text):
    """Puts `text` (one or more lines) after the file's first line; returns the line number
    the first inserted line gets."""
    path = os.path.join(tree, rel)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines[1:1] = text.split("\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return 2


def write(tree, rel, text):
    path = os.path.join(tree, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run_check(tree, *extra):
    result = subprocess.run(
        [sys.executable, os.path.join(tree, "scripts", "check-layers.py"), "--root", tree, *extra],
        capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


# Each case: (name, plant(tree) -> [expected output lines or fragments], expected exit status).

def unmodified(tree):
    return []


def model_includes_runtime(tree):
    line = insert_after_first_line(tree, "engine/src/model/gguf.cpp", '#include "runtime/rope_base.h"')
    return [f"engine/src/model/gguf.cpp:{line} includes runtime/rope_base.h: model may not include runtime"]


def engine_includes_qt(tree):
    line = insert_after_first_line(tree, "engine/src/cpu/ops.cpp", "#include <QString>")
    return [f"engine/src/cpu/ops.cpp:{line} includes QString: cpu may not include Qt"]


def engine_includes_qt_module_path(tree):
    line = insert_after_first_line(tree, "engine/src/runtime/sampler.cpp", "#  include <QtCore/QObject>")
    return [f"engine/src/runtime/sampler.cpp:{line} includes QtCore/QObject: runtime may not include Qt"]


def app_includes_engine_src(tree):
    line = insert_after_first_line(tree, "app/cli/main.cpp", '#include "cpu/ops.h"')
    return [f"app/cli/main.cpp:{line} includes cpu/ops.h: app/cli may not include cpu"]


def ui_includes_engine_src(tree):
    line = insert_after_first_line(tree, "ui/core/engine_worker.cpp", '#include "kv/kv_store.h"')
    return [f"ui/core/engine_worker.cpp:{line} includes kv/kv_store.h: ui/core may not include kv"]


def cuda_host_includes_cpu(tree):
    write(tree, "engine/src/cuda_host/extra.cpp", '#include "cuda_host/cuda_api.h"\n#include "cpu/simd.h"\n')
    return ["engine/src/cuda_host/extra.cpp:2 includes cpu/simd.h: cuda_host may not include cpu (sideways"]


def cpu_includes_cuda_host(tree):
    write(tree, "engine/src/kv/extra.cpp", '#include "cpu/ops.h"\n#include "cuda_host/cuda_api.h"\n')
    return ["engine/src/kv/extra.cpp:2 includes cuda_host/cuda_api.h: kv may not include cuda_host (sideways"]


def arch_includes_cpu(tree):
    write(tree, "engine/src/arch/llama.cpp", '#include "longscope/model.h"\n#include "cpu/ops.h"\n')
    return ["engine/src/arch/llama.cpp:2 includes cpu/ops.h: arch may not include cpu"]


def plugin_includes_engine(tree):
    line = insert_after_first_line(tree, "engine/src/cuda/plugin.cpp", '#include "longscope/model.h"')
    return [f"engine/src/cuda/plugin.cpp:{line} includes longscope/model.h: cuda may not include model"]


def commented_out_includes_pass(tree):
    insert_after_first_line(tree, "engine/src/model/gguf.cpp",
                            '// #include "runtime/rope_base.h"\n'
                            '/* #include <QString>\n#include <QWidget> */\n'
                            '#if 0\n#include "cpu/ops.h"\n#endif\n'
                            'static const char *const not_an_include = "/* #include <QString> */";')
    return []


def unplaced_folder(tree):
    write(tree, "engine/src/newpart/thing.cpp", '#include "longscope/types.h"\n')
    return ["engine/src/newpart/thing.cpp: not placed in any layer"]


def unplaced_public_header(tree):
    write(tree, "engine/include/longscope/new_api.h", "#pragma once\n")
    return ["engine/include/longscope/new_api.h: not placed in any layer"]


def allowlist_suppresses(tree):
    insert_after_first_line(tree, "engine/src/model/gguf.cpp", '#include "runtime/rope_base.h"')
    with open(os.path.join(tree, "scripts", "layer-allowlist.txt"), "a", encoding="utf-8") as f:
        f.write("\n# planted by the test\nengine/src/model/gguf.cpp -> runtime/rope_base.h\n")
    return []


def stale_allowlist_entry_is_noted(tree):
    with open(os.path.join(tree, "scripts", "layer-allowlist.txt"), "a", encoding="utf-8") as f:
        f.write("\nengine/src/model/gguf.cpp -> runtime/rope_base.h\n")
    return ["engine/src/model/gguf.cpp -> runtime/rope_base.h no longer happens"]


def split_ui_core_includes_widgets(tree):
    write(tree, "ui/widgets/panel.h", "#pragma once\n#include <QWidget>\n")
    write(tree, "ui/core/controller.h", "#pragma once\n#include <QObject>\n#include <QString>\n")
    write(tree, "ui/core/controller.cpp",
          '#include "controller.h"\n#include "panel.h"\n#include <QPushButton>\n'
          "#include <QtGui/QColor>\n#include \"longscope/engine.h\"\n")
    return ["ui/core/controller.cpp:2 includes panel.h: ui/core may not include ui/widgets (upward",
            "ui/core/controller.cpp:3 includes QPushButton: ui/core may not include Qt GUI/Widgets",
            "ui/core/controller.cpp:4 includes QtGui/QColor: ui/core may not include Qt GUI/Widgets"]


def remote_includes_qt_or_engine(tree):
    write(tree, "remote/client.cpp",
          '#include <QString>\n#include "longscope/engine.h"\n#include "core/engine_worker.h"\n'
          '#include <nlohmann/json.hpp>\n')
    return ["remote/client.cpp:1 includes QString: remote may not include Qt",
            "remote/client.cpp:2 includes longscope/engine.h: remote may not include runtime",
            "remote/client.cpp:3 includes core/engine_worker.h: remote may not include ui/core"]


def remote_included_by_ui_core_and_cli_passes(tree):
    write(tree, "remote/client.h", "#pragma once\n#include <string>\n")
    write(tree, "ui/core/uses_remote.cpp", '#include "remote/client.h"\n')
    write(tree, "app/cli/uses_remote.cpp", '#include "remote/client.h"\n')
    return []


def split_ui_allowed_directions_pass(tree):
    write(tree, "ui/core/controller.h", "#pragma once\n#include <QObject>\n#include \"longscope/engine.h\"\n")
    write(tree, "ui/widgets/panel.h", '#pragma once\n#include "controller.h"\n#include <QWidget>\n')
    return []


CASES = [
    ("unmodified tree passes", unmodified, 0),
    ("model including runtime fails", model_includes_runtime, 1),
    ("engine including a Qt class header fails", engine_includes_qt, 1),
    ("engine including a Qt module path fails", engine_includes_qt_module_path, 1),
    ("app including engine/src fails", app_includes_engine_src, 1),
    ("ui including engine/src fails", ui_includes_engine_src, 1),
    ("cuda_host including cpu fails", cuda_host_includes_cpu, 1),
    ("kv including cuda_host fails", cpu_includes_cuda_host, 1),
    ("arch including a backend implementation fails", arch_includes_cpu, 1),
    ("CUDA plugin including the engine's model fails", plugin_includes_engine, 1),
    ("commented-out and #if 0 includes pass", commented_out_includes_pass, 0),
    ("a file in an unplaced folder fails", unplaced_folder, 1),
    ("an unplaced public header fails", unplaced_public_header, 1),
    ("an allowlisted include passes", allowlist_suppresses, 0),
    ("a stale allowlist entry is noted and passes", stale_allowlist_entry_is_noted, 0),
    ("ui/core including ui/widgets or Qt Widgets fails", split_ui_core_includes_widgets, 1),
    ("ui/widgets including ui/core passes", split_ui_allowed_directions_pass, 0),
    ("remote including Qt, the engine or the ui fails", remote_includes_qt_or_engine, 1),
    ("ui/core and app/cli including remote passes", remote_included_by_ui_core_and_cli_passes, 0),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)),
                        help="the repository whose sources are copied (default: this one)")
    args = parser.parse_args()

    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="check-layers-") as tmp:
        base = os.path.join(tmp, "base")
        copy_tree(os.path.abspath(args.root), base)
        for index, (name, plant, want_rc) in enumerate(CASES):
            tree = os.path.join(tmp, f"case{index}")
            shutil.copytree(base, tree)
            expected = plant(tree)
            rc, output = run_check(tree)
            missing = [e for e in expected if e not in output]
            if rc == want_rc and not missing:
                passed += 1
                print(f"PASS   : {name}")
            else:
                failed += 1
                print(f"FAIL!  : {name}: exit status {rc}, expected {want_rc}")
                for e in missing:
                    print(f"   missing from the output: {e}")
                print("   output:\n" + "".join(f"      {line}\n" for line in output.splitlines()))
            shutil.rmtree(tree)
    print(f"Totals: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
