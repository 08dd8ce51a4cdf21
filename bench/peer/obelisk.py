#!/usr/bin/env python3
"""The old name of bench/peer/peer.py (cairn beside Obelisk): the same
arguments, the same figures; peer.py also runs Restate with --restate."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402

if __name__ == "__main__":
    peer.main()
