"""python -m rankcheck ARGS: the rankcheck binary this package installed, with ARGS."""

import os
import sys

from . import binary


def main():
    try:
        path = binary()
    except FileNotFoundError as e:
        print("rankcheck: %s" % e, file=sys.stderr)
        return 2
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
