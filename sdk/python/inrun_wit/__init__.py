"""The WIT contract the inrun_sdk modules speak, shipped as package data so a plugin
project builds against the same version as its SDK::

    componentize-py -d "$(python -m inrun_wit)" -w reconciler componentize app -o app.wasm

``DIR`` is ``inrun:reconciler@0.2.0`` (its ``deps/`` holds the 0.1.0 interfaces it
imports): the ``reconciler``, ``hooks`` and ``package`` worlds. ``DIR_0_1_0`` holds the
0.1.0 worlds alone.
"""

import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wit")
DIR = os.path.join(ROOT, "0.2.0")
DIR_0_1_0 = ROOT
