"""PySpark's worker daemon, started with PySpark imported from its installed package.

Spark puts ``pyspark.zip``, the py4j zip and the ``spark-core`` jar ahead of everything on its
Python workers' path. Python cannot cache compiled code for modules imported from a zip, so every
daemon compiled PySpark again (about a second), and every forked worker's first task re-read the
directories of all three archives (``importlib.invalidate_caches`` in PySpark's
``setup_spark_files``, 0.2–0.5 s: the jar holds thousands of entries). When PySpark is a pip
install, the zips are copies of the installed package next to them (``SPARK_HOME`` is the
package), so this daemon takes them off the path before anything is imported from them; PySpark
and py4j then come from the installed, compiled files. Any other layout (a separate
``SPARK_HOME``, another PySpark version) keeps Spark's path as it is.

``keyspan.runtime.session`` starts it (``spark.python.daemon.module``) in local mode, where the
workers run the driver's Python and keyspan is installed in it.
"""

from __future__ import annotations

import os
import runpy
import sys


def redundant_archives(path: list[str]) -> list[str]:
    """The entries of ``path`` that hold copies of packages installed in one of its directories: the
    zips under ``<pyspark>/python/lib`` and the jars under ``<pyspark>/jars`` of an installed
    ``pyspark`` package, provided that package and py4j are importable from a directory of ``path``."""
    directories = [p for p in path if os.path.isdir(p)]

    def installed(package: str) -> str | None:
        for d in directories:
            candidate = os.path.join(d, package)
            if os.path.isfile(os.path.join(candidate, "__init__.py")):
                return os.path.realpath(candidate)
        return None

    pyspark, py4j = installed("pyspark"), installed("py4j")
    if pyspark is None or py4j is None:
        return []
    archives = []
    for entry in path:
        if not os.path.isfile(entry):
            continue
        home, name = os.path.split(os.path.realpath(entry))
        if home == os.path.join(pyspark, "python", "lib") and name.endswith(".zip") and \
                (name == "pyspark.zip" or name.startswith("py4j-")):
            archives.append(entry)
        elif home == os.path.join(pyspark, "jars") and name.endswith(".jar"):
            archives.append(entry)
    return archives


def main() -> None:
    for entry in redundant_archives(sys.path):
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)  # else each worker's first task re-reads it
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
