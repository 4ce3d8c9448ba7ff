"""What the tests that run the real engine share: ``needs_engine`` skips a test unless
LIBTUNE_TUNE names the tune CLI and cloudpickle (which sends the trainables) is
installed. These tests run under ``unittest discover -s python/tests``, as
``python -m unittest python/tests/test_x.py`` and as scripts, so each puts this folder on
sys.path before importing it."""

import importlib.util
import os
import unittest

ENGINE = os.environ.get("LIBTUNE_TUNE")
HAVE_CLOUDPICKLE = importlib.util.find_spec("cloudpickle") is not None

needs_engine = unittest.skipUnless(ENGINE and HAVE_CLOUDPICKLE, "LIBTUNE_TUNE (the tune CLI) or cloudpickle missing")
