# The process a native object was created in (kipconsumer._fork's rule, in C): librdkafka's threads
# and the locks they hold exist only there. In a child made by fork(), an inherited object that owns
# librdkafka state (a handle, a mock cluster, messages) is foreign: its deallocation leaks that state
# instead of destroying it (destroying joins threads the child does not have: a crash or a hang), and
# nothing of librdkafka is called for it there.
from posix.types cimport pid_t
from posix.unistd cimport getpid


cdef inline pid_t this_process() noexcept nogil:
    return getpid()


cdef inline bint foreign_process(pid_t creator) noexcept nogil:
    """True in any process other than ``creator``, the one the object was created in."""
    return creator != getpid()
