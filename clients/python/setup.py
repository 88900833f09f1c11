# Debian 12's pybuild builds from setup.py; the metadata is pyproject.toml's.
from setuptools import setup

setup()
