"""A two-or-more rank MPI check for ``launcher: mpi`` gangs: every rank contributes
rank + 1 to a SUM allreduce and prints one line; a wrong sum exits 1.

    mpirun -np 2 python3 /app/gang/allreduce.py
    rank 0/2 on HOST: allreduce sum = 3 (expected 3) ok
"""

from __future__ import annotations

import socket
import sys

from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    expected = size * (size + 1) // 2
    verdict = "ok" if total == expected else "WRONG"
    print(
        f"rank {rank}/{size} on {socket.gethostname()}: allreduce sum = {total} (expected {expected}) {verdict}",
        flush=True,
    )
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
