"""Debian 12's torch 1.13 under Python 3.11: torchrun and torch.distributed.launch crash
before starting any worker ("'NoneType' object has no attribute 'get'"), because
``Std.from_str`` looks the value up by iterating the IntFlag ``Std``, and from Python
3.11 on that iteration skips NONE (0) and the composite ALL (3). ``fix()`` replaces the
lookup with ``Std(int(v))``; torch >= 2 (fixed upstream) is left as it is.
"""
import re


def fix():
    from torch.distributed.elastic.multiprocessing import api

    std = api.Std
    if all(std.from_str(str(v)) is not None for v in (0, 1, 2, 3)):
        return  # this torch (or Python) is not affected

    def from_str(cls, vm):
        if re.match(api._VALUE_REGEX, vm):
            return cls(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")

    std.from_str = classmethod(from_str)
