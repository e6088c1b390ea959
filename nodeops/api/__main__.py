"""`python -m nodeops.api [--output-dir DIR]`: print the CRDs, or regenerate their manifest files.

It lives here rather than only in the CLI so the manifests can be regenerated from the package
alone, which is what the drift test tells a developer to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nodeops.api import render_crds_yaml, write_all_crd_files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeops.api", description="Print or write the nodeops CRD manifests."
    )
    parser.add_argument(
        "--output-dir",
        help="write one <group>_<plural>.yaml per CRD and a kustomization.yaml listing them "
        "here instead of printing",
    )
    args = parser.parse_args(argv)
    if args.output_dir:
        for path in write_all_crd_files(args.output_dir):
            print(path)
    else:
        sys.stdout.write(render_crds_yaml())
    return 0


if __name__ == "__main__":
    sys.exit(main())
