"""Launching: the cuda-python modules loaded on first use, devices and contexts, the driver calls and launches.

The lowest runtime layer: nothing here knows descriptors or arrays beyond raw pointers.
"""
