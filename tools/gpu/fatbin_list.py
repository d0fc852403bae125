#!/usr/bin/env python3
"""Lists the GPU code in a host binary's .nv_fatbin section, one line per kind
and architecture with a count: "elf sm_90 12", "ptx compute_90 12".

The stand-in for `cuobjdump --list-elf --list-ptx` where the toolkit has no
cuobjdump (this one has none). The fat binary layout is NVIDIA's fatbinary.h:
a 16-byte container header (magic 0xBA55ED50, version, header size, size of
what follows), then entries, each a header (kind: 1 PTX, 2 ELF; its own size
at +4, the payload's size at +8, the architecture as a number at +28) and its
payload. Containers follow one another, 8-byte aligned."""
import collections
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "elf"}


def fatbin_section(path):
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path, out.name],
                       check=True)
        return open(out.name, "rb").read()


def list_entries(data):
    counts = collections.Counter()
    pos = 0
    while pos + 16 <= len(data):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:
            pos += 8  # padding between containers
            continue
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            name = KINDS.get(kind, f"kind{kind}")
            counts[(name, ("compute_" if name == "ptx" else "sm_") + str(arch))] += 1
            entry += entry_header + payload
        pos = (end + 7) & ~7
    return counts


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fatbin_list.py BINARY")
    counts = list_entries(fatbin_section(sys.argv[1]))
    if not counts:
        sys.exit(f"fatbin_list: no GPU code in {sys.argv[1]}")
    for (kind, arch), n in sorted(counts.items()):
        print(f"{kind} {arch} {n}")


if __name__ == "__main__":
    main()
