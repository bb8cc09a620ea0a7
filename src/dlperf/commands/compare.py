"""placeholder"""
from typing import Any

def add_parser(sub: Any):
    return sub.add_parser("compare", help="(in progress)")

def main(args) -> int:
    return 0
