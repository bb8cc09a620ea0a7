"""placeholder"""
from typing import Any

def add_parser(sub: Any):
    return sub.add_parser("report", help="(in progress)")

def main(args) -> int:
    return 0
