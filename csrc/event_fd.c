/* event_fd: see event_fd.h. */
#include "event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

const uint64_t kc_event_fd_one = 1;

int kc_event_fd_new(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void kc_event_fd_signal(int fd) {
    ssize_t r = write(fd, &kc_event_fd_one, sizeof(kc_event_fd_one));
    (void)r; /* a full counter (2^64 - 2 signals unread) is readable anyway */
}

void kc_event_fd_drain(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof(v)) == sizeof(v))
        ;
}
