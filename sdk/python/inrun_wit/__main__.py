"""``python -m inrun_wit [0.1.0|0.2.0]``: prints the WIT directory of that version
(default 0.2.0), failing when the package was installed without it."""

import os
import sys

import inrun_wit

version = sys.argv[1] if len(sys.argv) > 1 else "0.2.0"
path = {"0.2.0": inrun_wit.DIR, "0.1.0": inrun_wit.DIR_0_1_0}.get(version)
if path is None:
    sys.exit(f"inrun_wit: unknown version {version!r}; use 0.1.0 or 0.2.0")
if not os.path.isfile(os.path.join(path, "reconciler.wit")):
    sys.exit(f"inrun_wit: {path} holds no WIT; install the inrun-sdk wheel built by `make sdk`")
print(path)
