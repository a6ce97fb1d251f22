"""Needs an argument it is not given: argparse exits with status 2 and says why on stderr."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.parse_args()
