"""Code generation: a descriptor's plan -> the CUDA C++ prelude that instantiates the templates in kernels/."""
