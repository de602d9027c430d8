"""Package discovery; everything else is in pyproject.toml.

The content folders install under drill (exercises -> drill.exercises, ...), and every
topic's packages are found here, so a new topic needs no edit to the packaging.
"""

from setuptools import find_packages, setup

CONTENT = {"drill.exercises": "exercises", "drill.solutions": "solutions", "drill.kernels": "kernels"}


def packages_under(name: str, folder: str) -> list[str]:
    return [name] + [f"{name}.{sub}" for sub in find_packages(folder)]


setup(
    package_dir={"drill": "drill", **CONTENT},
    packages=packages_under("drill", "drill") + [p for n, f in CONTENT.items() for p in packages_under(n, f)],
)
