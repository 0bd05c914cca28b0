"""Share of PyFlink job files whose imports resolve on keyspan after swapping ``pyflink`` for ``keyspan``.

    python scripts/import_check.py DIR [--verbose]

Every ``.py`` file under DIR that imports ``pyflink`` counts; a file resolves when each of its
``import pyflink...`` / ``from pyflink... import name`` statements, with ``pyflink`` read as
``keyspan``, imports and finds every name. Files are parsed, never run.
"""

from __future__ import annotations

import argparse
import ast
import importlib
from collections import Counter
from pathlib import Path


def failures(path: Path) -> list[str]:
    """The imports of one file that do not resolve on keyspan (empty: the file resolves)."""
    missing = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            wanted = [(a.name, None) for a in node.names if a.name.split(".")[0] == "pyflink"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "pyflink":
            wanted = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in wanted:
            target = "keyspan" + module[len("pyflink"):]
            try:
                loaded = importlib.import_module(target)
                if name not in (None, "*") and not hasattr(loaded, name):
                    importlib.import_module(f"{target}.{name}")  # a submodule: from pyflink.x import y
            except Exception:  # noqa: BLE001 — any failure means the import does not resolve
                missing.append(module if name is None else f"{module}.{name}")
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--verbose", action="store_true", help="list every file that does not resolve")
    args = parser.parse_args()
    files, clean, blockers = 0, 0, Counter()
    for path in sorted(Path(args.directory).rglob("*.py")):
        text = path.read_text(errors="replace")
        if "pyflink" not in text:
            continue
        try:
            missing = failures(path)
        except SyntaxError:
            continue  # Python 2 files and fragments are not jobs
        files += 1
        clean += not missing
        blockers.update(set(missing))
        if missing and args.verbose:
            print(f"{path}: {', '.join(sorted(set(missing)))}")
    print(f"{clean}/{files} files resolve ({100 * clean / max(files, 1):.0f} %)")
    for name, count in blockers.most_common(15):
        print(f"  {count:4d}  {name}")


if __name__ == "__main__":
    main()
