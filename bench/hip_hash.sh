#!/usr/bin/env bash
# Print one hash of every kernel source under hip/ (what a prebuilt library was built from).
# LC_ALL=C: the file order must not depend on the machine's locale (the GPU machine's collates
# "paged_decode.cu" / "paged_decode_d128.cu" differently from this one's).
export LC_ALL=C
cd "$(dirname "${BASH_SOURCE[0]}")/.." && cat $(ls hip/*.cu hip/*.cuh hip/*.h hip/*.cpp | sort) | sha1sum | cut -c1-16
