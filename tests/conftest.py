"""Puts tests/ on sys.path so the shared helper modules here (harness_helpers, fixture_data) import by name
from every test folder, whatever order pytest collects the folders in."""
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
