"""setuptools entry: the mypyc extension modules when SERVESIM_COMPILE=1 (see _build/)."""

from servesim_build import ext_modules  # the in-tree build backend, on the path while building
from setuptools import setup

setup(ext_modules=ext_modules())
