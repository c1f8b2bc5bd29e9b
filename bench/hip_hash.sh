#!/usr/bin/env bash
# Print one hash of every kernel source under hip/ (what a prebuilt library was built from).
cd "$(dirname "${BASH_SOURCE[0]}")/.." && cat $(ls hip/*.cu hip/*.cuh hip/*.h hip/*.cpp | sort) | sha1sum | cut -c1-16
