"""``python -m benchmarks.bench``: collective benchmarks of the dummy backend.

It compares the ``dummy`` backend with gloo (and NCCL on CUDA) in the same rank processes,
with DeepSpeed's shared-memory allreduce and Open MPI where they are installed (each in rank
processes of its own, run after the torch ranks), and puts the numbers beside two references
measured in the same run: the c10d call path on PyTorch's FakeProcessGroup (the floor, in one
process and at each world size) and single-thread ``copy_`` bandwidth (the physical limit).

Modules: :mod:`.cli` (arguments), :mod:`.orchestrate` (the run), :mod:`.spawn` and
:mod:`.runner` (spawned rank processes), :mod:`.peers` (DeepSpeed and Open MPI drivers),
:mod:`.deepspeed_peer` and :mod:`.mpi_peer` (the programs they start), :mod:`.timing` (the
timing protocol they all share), :mod:`.baseline` (memcpy and floor),
:mod:`.rank_floor` (the floor at a world size), :mod:`.targets` (the
project's targets), :mod:`.report` and :mod:`.plot` (output). The multi-host mode:
:mod:`.hosts` (the run), :mod:`.host_layouts` (``--layouts``), :mod:`.host_launch` (a pass,
through torchrun or not) and :mod:`.host_rank` (a rank), :mod:`.host_passes` (medians and
spread), :mod:`.host_targets` and :mod:`.host_report`.
It lives outside the wheel and runs from the repository's root: ``python -m`` finds
``benchmarks`` and ``tools`` (the namespaced hosts) there, and so do the rank processes it
starts, which inherit that directory.
"""
