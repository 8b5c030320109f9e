"""Build hook only (the project's metadata is in pyproject.toml): a wheel ships the top-level
prompts/, configs/, personas/ and annotation/ folders as pipeline/_data/, so that an installed
prb finds them (pipeline/paths.py). An editable install reads them from the checkout."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("prompts", "configs", "personas", "annotation")


class BuildWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "pipeline" / "_data"
        for name in BUNDLED:
            shutil.copytree(
                root / name,
                target / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )


setup(cmdclass={"build_py": BuildWithData})
