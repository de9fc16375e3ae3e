"""One build step that pyproject.toml cannot say: the wheel leaves out appendix 14's measuring
helpers, transformer/benchmarks.py (timers, FLOP counts) and benchmark_peers.py (Hugging Face
models of the same size), which the appendix and tools/bench_*.py use in this repository; a
user of the models does not need them.
setuptools' exclude-package-data drops data files only, not modules, hence this subclass.
Everything else about the package is in pyproject.toml.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

NOT_SHIPPED = {("transformer", "benchmarks"), ("transformer", "benchmark_peers")}  # (package, module)


class BuildPy(build_py):
    def find_package_modules(self, package, package_dir):
        return [found for found in super().find_package_modules(package, package_dir)
                if found[:2] not in NOT_SHIPPED]


setup(cmdclass={"build_py": BuildPy})
