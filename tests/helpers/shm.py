"""What of /dev/shm this process holds. The suite's other processes make files there while a
test runs, so a test asks only about its own process's."""

import contextlib
import os


def held() -> list[str]:
    """The paths this process holds open or maps, as /proc shows them (a file unlinked since:
    its path and ``(deleted)``)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    with open("/proc/self/maps") as f:
        maps = [line.split(None, 5)[-1].strip() for line in f if len(line.split(None, 5)) == 6]
    return links + maps


def made_here(before: set[str]) -> set[str]:
    """The files in /dev/shm now, not in ``before``, that this process holds open or maps."""
    new = set(os.listdir("/dev/shm")) - before
    return {name for name in new if f"/dev/shm/{name}" in held()}
