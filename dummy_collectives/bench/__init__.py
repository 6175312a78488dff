"""``python -m dummy_collectives.bench``: collective benchmarks of the dummy backend.

It compares the ``dummy`` backend with gloo (and NCCL on CUDA) in the same rank processes,
with DeepSpeed's shared-memory allreduce and Open MPI where they are installed, and puts the
numbers beside two references measured in the same run: the c10d call path on PyTorch's
FakeProcessGroup (the floor) and single-thread ``copy_`` bandwidth (the physical limit).

Modules: :mod:`.cli` (arguments, orchestration), :mod:`.runner` (spawned rank processes),
:mod:`.peers` (DeepSpeed and Open MPI drivers), :mod:`.mpi_peer` (the program ``mpirun``
starts), :mod:`.timing` (the timing protocol they all share), :mod:`.baseline` (memcpy and
floor), :mod:`.targets` (the project's targets), :mod:`.report` and :mod:`.plot` (output).
Nothing here is imported by ``import dummy_collectives``.
"""
