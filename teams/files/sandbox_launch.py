"""The sandbox's launcher: a fresh interpreter (`python -I -S`, started by
teams.files.sandbox with an empty environment) that sets the command's standard
rlimits on itself, joins its pids cgroup when it has one, and becomes bwrap.

A separate process, not `preexec_fn`: Loom's workers run threads, and code run between
fork and exec in a threaded process may deadlock. Only the standard library is used, so
it starts in a few milliseconds and reads nothing of Loom's.

    python -I -S sandbox_launch.py CPU_SECONDS ADDRESS_BYTES FILE_BYTES PROCESSES \
        CGROUP_FOLDER_OR_- BWRAP ARGS...
"""

import os
import resource
import sys


def main(argv: list[str]) -> None:
    cpu, address, file_size, processes = (int(value) for value in argv[1:5])
    cgroup, command = argv[5], argv[6:]
    # Hard and soft alike: nothing inside may raise them again.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (address, address))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cgroup != "-":
        # For root, whom RLIMIT_NPROC does not bind: the folder's pids.max does.
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
