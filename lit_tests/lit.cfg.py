# -*- Python -*-
# ===- lit.cfg.py - lit configuration of the infer tests -----------------=== #
#
# RUN lines may use infer-opt, infer (the user CLI), FileCheck and not;
# %fixtures is the directory of test models and golden outputs, %python the
# Python interpreter CMake found.
#
# ===---------------------------------------------------------------------=== #

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "INFER"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = [
    "Inputs",
    "CMakeLists.txt",
    "README.md",
    "lit.cfg.py",
    "lit.site.cfg.py",
]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.infer_obj_root, "lit_tests")

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

# Tests call `infer` by name, as users do: the build's bin dir comes first.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.infer_tools_dir, append_path=True)

config.substitutions.append(("%fixtures", config.infer_fixtures_dir))
config.substitutions.append(("%python", config.python_executable))

llvm_config.add_tool_substitutions(
    [
        ToolSubst("infer-opt", unresolved="fatal"),
        ToolSubst("infer", unresolved="ignore"),
    ],
    [config.infer_tools_dir],
)

if config.infer_enable_cuda:
    config.available_features.add("cuda")
# `infer compile --target cuda` compiles the generated kernels with NVRTC.
if config.infer_has_nvrtc:
    config.available_features.add("nvrtc")
