# The checked debugging device (docs/notes/backends.md): always built, off at run time unless
# MIXTRAIN_CHECKED_DEVICE=1. Its kernels are the CPU's behind a placement guard.
