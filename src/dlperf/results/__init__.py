"""Typed results: :mod:`.model` holds the types, :mod:`.codec` reads and writes them."""

from dlperf.results.codec import device_of, read_repeat, read_result, to_dict, write_result
from dlperf.results.model import RankFigures, RankRecord, Repeat, Result, Throughput

__all__ = ["RankFigures", "RankRecord", "Repeat", "Result", "Throughput", "device_of",
           "read_repeat", "read_result", "to_dict", "write_result"]
