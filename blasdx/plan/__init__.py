"""Plans: every choice blasdx makes for a kernel (instruction, tiling, block size, layouts), from plain values.

The layer just above the type table: it knows sizes and dtypes, never descriptors, so the
descriptor's traits and the code generators ask it the same questions and get one answer.
"""
