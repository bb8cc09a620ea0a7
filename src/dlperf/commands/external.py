"""placeholder"""
from typing import Any

def add_parser(sub: Any):
    return sub.add_parser("external", help="(in progress)")

def main(args) -> int:
    return 0
